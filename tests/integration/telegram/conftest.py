"""Fixtures: a fake Bot API server, a TelegramChannel pointed at it, Ingest on real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette

from agent_core.events import InboundEvent
from agent_core.ingest import Ingest
from agent_core.store import keys
from agent_core.store.pacing import Pacer
from channels.base import ChannelDeps
from channels.telegram import TelegramChannel
from channels.telegram.sender import Limits
from channels.telegram.settings import TelegramSettings
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram

SECRET = WEBHOOK_SECRET
FAST = Limits(
    chat_interval=0.2,
    group_interval=0.3,
    global_interval=0.0,
    typing_interval=0.05,
    edit_max_wait=0.02,
    max_retry_wait=5.0,
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    await server.start()
    yield server
    await server.stop()


def make_settings(fake: FakeTelegram, **kw: object) -> TelegramSettings:
    base: dict[str, object] = {
        "telegram_bot_token": TOKEN,
        "telegram_api_base_url": fake.base_url,
        "telegram_webhook_secret": SECRET,
        "telegram_poll_timeout": 1,
    }
    base.update(kw)
    return TelegramSettings(**base)  # type: ignore[arg-type]


async def make_channel(
    fake: FakeTelegram,
    redis: Redis,
    *,
    public_url: str = "https://parley.example",
    group_reply: str = "mention",
    limits: Limits = FAST,
    **kw: object,
) -> TelegramChannel:
    deps = ChannelDeps(
        redis=redis, pacer=Pacer(redis), public_url=public_url, group_reply=group_reply
    )
    ch = TelegramChannel(make_settings(fake, **kw), deps, limits=limits)
    await ch.initialize()
    return ch


@pytest.fixture
async def channel(fake: FakeTelegram, redis: Redis) -> AsyncIterator[TelegramChannel]:
    ch = await make_channel(fake, redis)
    yield ch
    await ch.shutdown()


@pytest.fixture
def ingest(redis: Redis) -> Ingest:
    return Ingest(redis)


@pytest.fixture
async def webhook(fake: FakeTelegram, channel: TelegramChannel, ingest: Ingest) -> FakeTelegram:
    """The channel's webhook route served to the fake (ASGI transport), webhook set."""
    app = Starlette(routes=channel.routes(ingest))
    fake.webhook_transport = httpx.ASGITransport(app=app)
    fake.webhook = {"url": "http://127.0.0.1:9/telegram/webhook", "secret_token": SECRET}
    return fake


async def _published(redis: Redis) -> list[InboundEvent]:
    entries = await redis.xrange(keys.INBOX_STREAM)
    return [InboundEvent.from_json(fields[b"e"]) for _id, fields in entries]


@pytest.fixture
def published(redis: Redis) -> Callable[[], Awaitable[list[InboundEvent]]]:
    """``await published()``: the events in the inbox stream, in order."""
    return lambda: _published(redis)


@pytest.fixture
def channel_factory(fake: FakeTelegram, redis: Redis) -> Callable[..., Awaitable[TelegramChannel]]:
    return lambda **kw: make_channel(fake, redis, **kw)
