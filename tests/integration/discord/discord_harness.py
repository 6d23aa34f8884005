"""Helpers for the Discord integration tests (imported by conftest and tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from redis.asyncio import Redis

from agent_core.events import InboundEvent
from agent_core.ingest import Ingest
from agent_core.store import keys
from channels.discord.channel import DiscordChannel


class Gateway:
    """A DiscordChannel whose gateway runs in a background task."""

    def __init__(self, channel: DiscordChannel, ingest: Ingest, redis: Redis) -> None:
        self.channel = channel
        self.ingest = ingest
        self.redis = redis
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.stop = asyncio.Event()
        await self.channel.initialize()
        self.task = asyncio.create_task(self.channel.run_gateway(self.ingest, self.stop))

    async def halt(self) -> None:
        self.stop.set()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self.task, 10)
            self.task = None
        await self.channel.shutdown()

    async def published(self) -> list[InboundEvent]:
        entries = await self.redis.xrange(keys.INBOX_STREAM)
        return [InboundEvent.from_json(fields[b"e"]) for _, fields in entries]

    async def wait_published(self, count: int, within: float = 5.0) -> list[InboundEvent]:
        deadline = asyncio.get_running_loop().time() + within
        while True:
            events = await self.published()
            if len(events) >= count:
                return events
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"expected {count} published events, got {events}")
            await asyncio.sleep(0.02)


async def wait_client_ready(gw: Gateway, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        client = gw.channel.client
        if client is not None and client.is_ready() and client.catchups:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("discord gateway client never became ready")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def ready_gateway(make: Callable[..., Gateway], **settings: Any) -> AsyncIterator[Gateway]:
    """A gateway made with ``settings``, started and ready; halted afterwards."""
    gw = make(**settings)
    await gw.start()
    try:
        await wait_client_ready(gw)
        yield gw
    finally:
        await gw.halt()
