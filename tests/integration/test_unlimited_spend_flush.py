"""Spend counted with no budget limit set (Budget.book_later) is added to Redis by
the runtime's metrics flush: exactly once, even when Redis's reply comes late."""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any

from redis.asyncio import Redis

from agent_core.store import keys, scripts


async def _slow_reply_proxy(
    target: str, delay: dict[str, float], sent: asyncio.Event
) -> tuple[str, asyncio.Server]:
    """A unix-socket proxy to ``target`` holding server->client bytes delay['s'] s;
    ``sent`` is set each time client bytes reach the server."""
    path = os.path.join(tempfile.mkdtemp(), "slow.sock")

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_unix_connection(target)

        async def up() -> None:
            while data := await cr.read(65536):
                sw.write(data)
                await sw.drain()
                sent.set()
            sw.close()

        async def down() -> None:
            while data := await sr.read(65536):
                await asyncio.sleep(delay["s"])
                cw.write(data)
                await cw.drain()
            cw.close()

        await asyncio.gather(up(), down(), return_exceptions=True)

    server = await asyncio.start_unix_server(handle, path)
    return path, server


async def test_a_periodic_flush_waits_for_a_slow_reply_and_books_the_spend_once(
    runtime: Any, valkey: Any, redis: Any
) -> None:
    async with runtime("worker") as rt:
        budget = rt.agent.budget
        day = budget.day()
        delay = {"s": 0.0}
        path, server = await _slow_reply_proxy(valkey.socket_path, delay, asyncio.Event())
        budget.redis = Redis(unix_socket_path=path)
        try:
            await budget.redis.ping()  # a pooled connection, already open
            budget.book_later("telegram:1", 1.0)  # $1 spent, booked with the next flush
            delay["s"] = 3.0  # replies take 3 s for a while (more than a shutdown step)
            await rt._flush_metrics()  # what _metrics_loop does every 5 s
            delay["s"] = 0.0
            await rt._flush_metrics()  # the next tick
            booked = int(await redis.get(keys.budget_day(day)) or 0)
        finally:
            await budget.redis.aclose()
            server.close()
        assert booked == 1_000_000, f"$1 spent, ${booked / 1e6} booked"


async def test_a_flush_cancelled_after_redis_got_it_is_not_booked_again(
    runtime: Any, valkey: Any, redis: Any
) -> None:
    """The shutdown's bounded flush (or any cancellation) cuts a flush whose script
    Redis already ran: the retry with the batch's token adds nothing."""
    async with runtime("worker") as rt:
        budget = rt.agent.budget
        day = budget.day()
        delay, sent = {"s": 0.0}, asyncio.Event()
        path, server = await _slow_reply_proxy(valkey.socket_path, delay, sent)
        budget.redis = Redis(unix_socket_path=path)
        try:
            await budget.redis.ping()
            await redis.script_load(scripts.BUDGET_FLUSH)  # one call: no NOSCRIPT retry
            budget.book_later("telegram:1", 1.0)
            delay["s"] = 3600.0  # the reply never comes back in this test
            sent.clear()
            flush = asyncio.create_task(budget.flush())
            await sent.wait()  # the flush reached Redis
            flush.cancel()
            await asyncio.gather(flush, return_exceptions=True)
            while not await redis.get(keys.budget_day(day)):  # Redis ran it
                await asyncio.sleep(0.01)
            delay["s"] = 0.0
            await budget.flush()  # the next flush retries the batch
            await budget.flush()
            booked = int(await redis.get(keys.budget_day(day)) or 0)
            user = int(await redis.get(keys.budget_user(day, "telegram:1")) or 0)
        finally:
            await budget.redis.aclose()
            server.close()
        assert (booked, user) == (1_000_000, 1_000_000)
