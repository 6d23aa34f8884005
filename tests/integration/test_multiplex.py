"""agent_core.store.multiplex: every round trip of a process on one shared
connection, on a real Valkey (the general client ``make_clients`` builds)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from redis.exceptions import ConnectionError, NoScriptError

from agent_core.store.client import RedisClients, make_clients
from agent_core.store.embedded import EmbeddedValkey
from agent_core.store.wire import _shared, call, close_shared, roundtrip


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


async def test_a_write_larger_than_the_transport_buffer(redis_clients: RedisClients) -> None:
    big = b"x" * 8_000_000
    out = await roundtrip(redis_clients.redis, [("SET", "big", big), ("STRLEN", "big")])
    assert out == [b"OK", len(big)]


def test_a_client_used_from_a_second_event_loop_connects_again(valkey: EmbeddedValkey) -> None:
    clients = make_clients(valkey.url)

    async def use() -> Any:
        return await call(clients.redis, "PING")

    assert asyncio.run(use()) == b"PONG"
    assert asyncio.run(use()) == b"PONG"
    asyncio.run(clients.close())


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
