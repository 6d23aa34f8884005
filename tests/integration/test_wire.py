"""agent_core.store.wire: one round trip, on a real Valkey, both ways it is sent:
on a pooled connection (the ``blocking`` client) and on the shared connection
(the general client, ``multiplex.py``; its own behaviour is in test_multiplex.py)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from redis.exceptions import NoScriptError, ResponseError

from agent_core.store.client import RedisClients
from agent_core.store.scripting import run_pipelined, run_script
from agent_core.store.wire import _shared, call, pairs, roundtrip


@pytest.fixture(params=["pooled", "shared"])
def redis(request: pytest.FixtureRequest, redis_clients: RedisClients) -> Any:
    client = redis_clients.redis if request.param == "shared" else redis_clients.blocking
    assert (client in _shared) == (request.param == "shared")
    return client


@pytest.fixture
def pooled(redis_clients: RedisClients) -> Any:
    return redis_clients.blocking


async def test_replies_in_order_and_a_refusal_in_its_place(redis: Any) -> None:
    await redis.set("s", "text")
    out = await roundtrip(redis, [("INCR", "n"), ("INCR", "s"), ("GET", "s")])
    assert out[0] == 1
    assert isinstance(out[1], ResponseError)
    assert out[2] == b"text"
    # the connection went back to the pool in a clean state
    assert await call(redis, "INCR", "n") == 2
    with pytest.raises(ResponseError):
        await call(redis, "INCR", "s")


async def test_a_cancelled_read_never_leaks_its_reply_to_the_next_caller(pooled: Any) -> None:
    """Cancelled while waiting for a reply: that connection is closed, so the late
    reply cannot be read by whoever borrows the connection next."""
    redis = pooled
    task = asyncio.create_task(roundtrip(redis, [("BLPOP", "q", 5)]))
    await asyncio.sleep(0.2)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await redis.rpush("q", "item")
    for _ in range(5):  # every pooled connection answers its own command
        assert await call(redis, "PING") in (b"PONG", True, "PONG")
    assert await call(redis, "LRANGE", "q", 0, -1) == [b"item"]  # nobody popped it


async def test_maps_decode_under_both_protocols(redis: Any) -> None:
    await redis.hset("h", mapping={"a": "1", "b": "2"})
    assert pairs(await call(redis, "HGETALL", "h")) == {b"a": b"1", b"b": b"2"}
    assert pairs([b"a", b"1"]) == {b"a": b"1"}
    assert pairs(None) == {} and pairs([]) == {}


async def test_scripts_survive_a_flush_and_never_run_twice(redis: Any) -> None:
    counted = redis.register_script("return redis.call('INCR', KEYS[1])")
    assert await run_script(redis, counted, ["c"], []) == 1
    await redis.script_flush()
    # NOSCRIPT: nothing ran, the script is loaded and sent once more
    assert await run_pipelined(redis, [(counted, ["c"], []), (counted, ["d"], [])]) == [2, 1]
    assert await redis.get("c") == b"2"


async def test_a_script_error_is_raised_not_returned(redis: Any) -> None:
    failing = redis.register_script("return redis.error_reply('nope')")
    with pytest.raises(ResponseError, match="nope") as info:
        await run_script(redis, failing, [], [])
    assert not isinstance(info.value, NoScriptError)


async def test_after_a_flush_the_plain_commands_ride_again_with_the_scripts(redis: Any) -> None:
    counted = redis.register_script("return redis.call('INCR', KEYS[1])")
    assert await run_pipelined(redis, [(counted, ["c"], [])], then=[("SADD", "s", "x")]) == [1]
    await redis.script_flush()
    then = [("SADD", "s", "y"), ("SADD", "s", "z")]
    assert await run_pipelined(redis, [(counted, ["c"], []), (counted, ["d"], [])], then) == [2, 1]
    assert await redis.smembers("s") == {b"x", b"y", b"z"}
    with pytest.raises(ResponseError):  # a refused plain command is raised too
        await run_pipelined(redis, [(counted, ["c"], [])], then=[("INCR", "s")])
