"""agent_core.store.multiplex: every round trip of a process on one shared
connection, on a real Valkey (the general client ``make_clients`` builds)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import Any

import pytest
from redis.exceptions import ConnectionError, NoScriptError

from agent_core.store.client import RedisClients, make_clients
from agent_core.store.embedded import EmbeddedValkey
from agent_core.store.multiplex import _Link
from agent_core.store.wire import _shared, call, close_shared, roundtrip
from tests.integration.valkey_proxy import valkey_proxy


async def _connections(clients: RedisClients) -> int:
    return len(await clients.blocking.client_list())


async def _shared_id(clients: RedisClients) -> int:
    return int(await call(clients.redis, "CLIENT", "ID"))


async def test_concurrent_round_trips_each_get_their_own_replies_on_one_connection(
    redis_clients: RedisClients,
) -> None:
    r = redis_clients.redis
    await call(r, "PING")
    before = await _connections(redis_clients)

    async def one(i: int) -> None:
        for n in range(5):
            out = await roundtrip(
                r, [("SET", f"k{i}", f"{i}-{n}"), ("GET", f"k{i}"), ("INCR", "total")]
            )
            assert out[0] == b"OK" and out[1] == f"{i}-{n}".encode()

    await asyncio.gather(*(one(i) for i in range(300)))
    assert await call(r, "GET", "total") == b"1500"
    assert await _connections(redis_clients) == before  # no connection per caller


async def test_a_refusal_comes_back_in_its_place_as_redis_py_names_it(
    redis_clients: RedisClients,
) -> None:
    out = await roundtrip(redis_clients.redis, [("EVALSHA", "0" * 40, 0), ("PING",)])
    assert isinstance(out[0], NoScriptError) and out[1] == b"PONG"


async def test_a_cancelled_caller_leaves_the_connection_in_step(
    redis_clients: RedisClients,
) -> None:
    """The cancelled caller's reply still arrives; it is read and dropped, and the
    next caller gets its own reply on the same connection."""
    r = redis_clients.redis
    first = await _shared_id(redis_clients)
    slow = asyncio.create_task(roundtrip(r, [("BLPOP", "q", "0.3")]))
    await asyncio.sleep(0.05)
    slow.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await slow
    assert await call(r, "PING") == b"PONG"
    assert await call(r, "LPUSH", "q", "x") == 1
    assert await _shared_id(redis_clients) == first


async def test_an_idle_connection_killed_by_the_server_is_replaced(
    redis_clients: RedisClients,
) -> None:
    first = await _shared_id(redis_clients)
    await redis_clients.blocking.client_kill_filter(_id=first)
    await asyncio.sleep(0.05)
    assert await call(redis_clients.redis, "PING") == b"PONG"
    assert await _shared_id(redis_clients) != first


async def test_round_trips_waiting_on_a_lost_connection_fail_and_are_not_resent(
    redis_clients: RedisClients,
) -> None:
    r = redis_clients.redis
    first = await _shared_id(redis_clients)
    waiting = asyncio.create_task(roundtrip(r, [("BLPOP", "q", 5)]))
    behind = asyncio.create_task(roundtrip(r, [("INCR", "n")]))
    await asyncio.sleep(0.05)
    await redis_clients.blocking.client_kill_filter(_id=first)
    for task in (waiting, behind):
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(task, 2)
    # INCR was written, so it may have run; it is never sent a second time
    assert await redis_clients.blocking.get("n") in (None, b"1")
    assert await call(r, "INCR", "m") == 1


async def test_a_write_larger_than_the_transport_buffer_waits_for_it_to_drain(
    redis_clients: RedisClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    paused: list[int] = []
    original = _Link.pause_writing
    monkeypatch.setattr(_Link, "pause_writing", lambda self: paused.append(1) or original(self))
    big = b"x" * 8_000_000
    r = redis_clients.redis
    out = await asyncio.gather(
        roundtrip(r, [("SET", "big", big), ("STRLEN", "big")]), call(r, "ECHO", "behind")
    )
    assert out == [[b"OK", len(big)], b"behind"]
    assert paused  # the socket's buffer filled, and the caller waited for it


async def test_a_resp3_false_reply_is_a_reply(redis_clients: RedisClients) -> None:
    """hiredis answers "no complete reply yet" with False unless told otherwise;
    a script's RESP3 false must not be mistaken for it."""
    r = redis_clients.redis
    both = asyncio.gather(
        roundtrip(r, [("EVAL", "redis.setresp(3); return false", 0)]),
        call(r, "ECHO", "second"),
        call(r, "ECHO", "third"),
    )
    out = await asyncio.wait_for(both, 5)
    assert out == [[False], b"second", b"third"]


async def test_a_server_push_is_nobodys_reply(redis_clients: RedisClients) -> None:
    """Client tracking sends invalidation pushes on the shared connection; the
    caller waiting at the time still gets its own reply."""
    r = redis_clients.redis
    assert await call(r, "CLIENT", "TRACKING", "ON") == b"OK"
    assert await call(r, "GET", "tracked") is None  # now tracked
    waiting = asyncio.create_task(roundtrip(r, [("BLPOP", "q", "0.3")]))
    await asyncio.sleep(0.05)
    await redis_clients.blocking.set("tracked", "changed")  # -> a push to r's connection
    behind = asyncio.create_task(call(r, "ECHO", "behind"))
    assert await asyncio.wait_for(waiting, 5) == [None]
    assert await asyncio.wait_for(behind, 5) == b"behind"
    assert await call(r, "GET", "tracked") == b"changed"


async def test_callers_arriving_during_a_failing_connect_share_that_one_attempt(
    valkey: EmbeddedValkey,
) -> None:
    async with valkey_proxy(valkey, forward=False) as seen:
        clients = make_clients(f"redis://127.0.0.1:{seen['port']}/0")
        try:
            results = await asyncio.gather(
                *(call(clients.redis, "PING") for _ in range(10)), return_exceptions=True
            )
        finally:
            await clients.close()
    assert all(isinstance(r, ConnectionError) for r in results)
    # one attempt with the client's retry policy (3 retries), not one per caller
    assert 1 <= seen["accepted"] <= 4


async def test_closing_during_a_connect_leaves_no_connection_open(
    valkey: EmbeddedValkey,
) -> None:
    async with valkey_proxy(valkey, forward=True, delay=0.3) as seen:
        clients = make_clients(f"redis://127.0.0.1:{seen['port']}/0")
        caller = asyncio.create_task(call(clients.redis, "PING"))
        await asyncio.sleep(0.1)
        assert seen["accepted"] == 1
        await clients.close()
        with pytest.raises(ConnectionError):
            await caller
        for _ in range(50):
            if seen["open"] == 0:
                break
            await asyncio.sleep(0.02)
        assert seen["open"] == 0


def test_on_uvloop_over_the_unix_socket(valkey: EmbeddedValkey) -> None:
    """What ``parley run`` uses with the embedded Valkey."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        clients = make_clients(valkey.url)
        r = clients.redis
        try:
            first = await _shared_id(clients)
            out = await asyncio.gather(*(call(r, "ECHO", f"m{i}") for i in range(200)))
            assert out == [f"m{i}".encode() for i in range(200)]
            slow = asyncio.create_task(roundtrip(r, [("BLPOP", "uv-q", "0.2")]))
            await asyncio.sleep(0.05)
            slow.cancel()
            assert await call(r, "ECHO", "after") == b"after"
            assert await _shared_id(clients) == first
            await clients.blocking.client_kill_filter(_id=first)
            await asyncio.sleep(0.05)
            assert await _shared_id(clients) != first
        finally:
            await clients.close()

    uvloop.run(main())


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_client_used_from_a_second_event_loop_connects_again(valkey: EmbeddedValkey) -> None:
    """One loop per client is the rule (the first loop's socket is shut down and
    left to the garbage collector: hence the ignored ResourceWarning)."""
    clients = make_clients(valkey.url)

    async def shared_id() -> int:
        return int(await call(clients.redis, "CLIENT", "ID"))

    async def connected_ids_then_close() -> set[int]:
        await asyncio.sleep(0.1)  # the server's side of a shut-down socket closes
        ids = {int(c["id"]) for c in await clients.blocking.client_list()}
        await clients.close()
        return ids

    first = asyncio.run(shared_id())
    second = asyncio.run(shared_id())
    assert second != first
    assert first not in asyncio.run(connected_ids_then_close())  # the first one ended
    gc.collect()


async def test_after_close_the_client_goes_back_to_its_pool(valkey: EmbeddedValkey) -> None:
    clients = make_clients(valkey.url)
    mux = _shared[clients.redis]
    assert await call(clients.redis, "PING") == b"PONG"
    await close_shared(clients.redis)
    assert clients.redis not in _shared
    with pytest.raises(ConnectionError):
        await mux.roundtrip([("PING",)])
    assert await call(clients.redis, "PING") == b"PONG"  # the pooled path
    await clients.close()


async def test_a_tcp_connection_gives_up_on_a_vanished_server(valkey: EmbeddedValkey) -> None:
    """Keepalive probes only an idle connection; the shared one is seldom idle, so
    unacknowledged data for 25 s also ends it (where the platform has the option)."""
    import socket

    option = getattr(socket, "TCP_USER_TIMEOUT", None)
    if option is None:
        pytest.skip("no TCP_USER_TIMEOUT on this platform")
    async with valkey_proxy(valkey, forward=True) as seen:
        clients = make_clients(f"redis://127.0.0.1:{seen['port']}/0")
        try:
            assert await call(clients.redis, "PING") == b"PONG"
            link = _shared[clients.redis]._link
            assert link is not None
            sock = link.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, option) == 25_000
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        finally:
            await clients.close()


async def test_a_connection_that_ends_right_after_the_handshake_fails_the_caller(
    redis_clients: RedisClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end can arrive before the caller that waited for the connect runs: it
    gets ConnectionError (it used to write into the closed transport and wait)."""
    import agent_core.store.multiplex as multiplex

    opened = multiplex._open

    async def open_then_lose(pool: Any) -> Any:
        link = await opened(pool)
        link.transport.abort()  # connection_lost runs before the caller resumes
        return link

    monkeypatch.setattr(multiplex, "_open", open_then_lose)
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(call(redis_clients.redis, "PING"), 5)
    monkeypatch.setattr(multiplex, "_open", opened)
    assert await call(redis_clients.redis, "PING") == b"PONG"  # and the next one connects


async def test_a_caller_cancelled_during_the_connect_leaves_the_attempt_to_the_others(
    valkey: EmbeddedValkey,
) -> None:
    async with valkey_proxy(valkey, forward=True, delay=0.3) as seen:
        clients = make_clients(f"redis://127.0.0.1:{seen['port']}/0")
        try:
            first = asyncio.create_task(call(clients.redis, "PING"))
            await asyncio.sleep(0.1)
            second = asyncio.create_task(call(clients.redis, "ECHO", "second"))
            first.cancel()
            assert await asyncio.wait_for(second, 5) == b"second"
            assert seen["accepted"] == 1
        finally:
            await clients.close()
