"""A call's real cost is booked exactly once, and its reservation never outlives it.

A record that failed (a Redis error before the script ran, or a reply lost after it
ran) left the reservation in the reservations hash for its 10 minutes: near a
limit every later call of that person (or everyone's, for the day's budget) waited
20 s and was refused.  Now the record is kept and sent again with the next flush
(the runtime's, every 5 s), idempotent per reservation: the cost is added once and
the reservation dropped either way.  A check cut off while its script was in
flight (an /interrupt during the wait for room, the turn's timeout) gives back
what it reserved, and its hourly action, once the reply is in."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from agent_core.agent.budget import BudgetGuard
from agent_core.settings import CoreSettings
from agent_core.store import keys, scripts

USER = "web:p1"


class Proxy:
    """A unix-socket proxy to Valkey whose ``mode`` says what happens to a command:
    "pass"; "drop": the connection is closed before the command reaches Valkey;
    "lose": Valkey runs it, and the connection is closed instead of the reply;
    "hold": Valkey runs it, and the reply waits until the mode is "pass" again."""

    def __init__(self) -> None:
        self.mode = "pass"
        self.sent = asyncio.Event()  # set when a command reaches Valkey
        self.open = asyncio.Event()  # "hold" ended
        self.open.set()

    def set(self, mode: str) -> None:
        self.mode = mode
        if mode == "hold":
            self.open.clear()
        else:
            self.open.set()

    async def handle(self, target: str, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_unix_connection(target)

        async def up() -> None:
            while data := await cr.read(65536):
                if self.mode == "drop":
                    break
                sw.write(data)
                await sw.drain()
                self.sent.set()
            cw.close()
            sw.close()

        async def down() -> None:
            while data := await sr.read(65536):
                if self.mode == "lose":
                    break
                await self.open.wait()
                cw.write(data)
                await cw.drain()
            cw.close()
            sw.close()

        await asyncio.gather(up(), down(), return_exceptions=True)


@asynccontextmanager
async def proxied(valkey: Any) -> AsyncIterator[tuple[Proxy, Redis]]:
    proxy = Proxy()
    path = os.path.join(tempfile.mkdtemp(), "budget.sock")
    target = str(valkey.socket_path)
    server = await asyncio.start_unix_server(lambda r, w: proxy.handle(target, r, w), path)
    client = Redis(unix_socket_path=path, retry=Retry(NoBackoff(), retries=0))
    try:
        yield proxy, client
    finally:
        await client.aclose()
        server.close()


async def _day_and_held(redis: Redis, guard: BudgetGuard) -> tuple[int, dict[bytes, bytes]]:
    day = guard.day()
    spent = int(await redis.get(keys.budget_day(day)) or 0)
    return spent, await redis.hgetall(keys.budget_reserved(day))


async def test_a_record_that_never_reached_redis_is_sent_with_the_next_flush(
    valkey: Any, redis: Redis
) -> None:
    async with proxied(valkey) as (proxy, client):
        guard = BudgetGuard(client, CoreSettings(daily_budget_usd=1.0))
        rid = await guard.reserve(USER, 0.9)  # in flight: 90 % of the day held
        proxy.set("drop")
        with pytest.raises((RedisError, OSError)):
            await guard.record(USER, rid, 0.1)
        proxy.set("pass")
        spent, held = await _day_and_held(redis, guard)
        assert (spent, list(held)) == (0, [rid.encode()])  # not booked yet
        await guard.flush()  # what the runtime does every 5 s
        spent, held = await _day_and_held(redis, guard)
        assert held == {}, f"the failed record's reservation is still held: {held}"
        assert spent == 100_000
        await guard.flush()  # sent once: nothing is left to send again
        assert (await _day_and_held(redis, guard))[0] == 100_000


async def test_a_record_whose_reply_was_lost_is_not_booked_twice(valkey: Any, redis: Redis) -> None:
    async with proxied(valkey) as (proxy, client):
        await redis.script_load(scripts.BUDGET_RECORD)  # one call: no NOSCRIPT retry
        guard = BudgetGuard(client, CoreSettings(daily_budget_usd=1.0))
        rid = await guard.reserve(USER, 0.9)
        proxy.set("lose")
        with pytest.raises((RedisError, OSError)):
            await guard.record(USER, rid, 0.1)
        proxy.set("pass")
        assert await _day_and_held(redis, guard) == (100_000, {})  # Valkey ran it
        await guard.flush()  # the retry finds the marker: adds nothing
        await guard.flush()
        spent, held = await _day_and_held(redis, guard)
        user = int(await redis.get(keys.budget_user(guard.day(), USER)) or 0)
        assert (spent, user, held) == (100_000, 100_000, {})


async def test_a_check_cut_off_in_flight_gives_its_reservation_back(
    valkey: Any, redis: Redis
) -> None:
    """/interrupt (or the turn's timeout) cancels a check whose script Valkey runs:
    the call is never made, so its reservation and hourly action go once the reply
    is in, at no cost."""
    async with proxied(valkey) as (proxy, client):
        await redis.script_load(scripts.BUDGET_RESERVE)
        await redis.script_load(scripts.BUDGET_RECORD)
        settings = CoreSettings(daily_budget_usd=1.0, hourly_action_limit=5)
        guard = BudgetGuard(client, settings)
        await client.ping()  # a pooled connection, already open
        proxy.set("hold")
        proxy.sent.clear()
        check = asyncio.create_task(guard.reserve(USER, 0.9))
        await proxy.sent.wait()  # the check reached Valkey
        check.cancel()
        await asyncio.gather(check, return_exceptions=True)
        held = await redis.hgetall(keys.budget_reserved(guard.day()))
        assert len(held) == 1  # Valkey reserved it; its reply is held back
        proxy.set("pass")
        for _ in range(500):  # the give-back runs once the reply is in
            spent, held = await _day_and_held(redis, guard)
            if not held:
                break
            await asyncio.sleep(0.01)
        assert held == {}, f"a cut-off check left its reservation: {held}"
        assert spent == 0
        assert await redis.zcard(keys.budget_actions(USER)) == 0  # no call was made
