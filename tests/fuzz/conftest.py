"""Fuzz fixtures: the real webhook endpoints on an ASGI transport, a real Ingest on the
test Valkey that counts what it published."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from telegram import Bot

from agent_core.events import InboundEvent
from agent_core.ingest import Ingest, Submitted
from agent_core.store.pacing import Pacer
from channels.base import ChannelDeps
from channels.slack.inbound import EventsEndpoint, SlackInbound
from channels.slack.state import SlackState
from channels.telegram.parse import ParseContext
from channels.telegram.webhook import PATH, make_endpoint
from channels.web.channel import WebChannel, WebSettings
from tests.fakes.slack import BOT_USER, SIGNING_SECRET
from tests.fakes.telegram import BOT_ID, BOT_USERNAME, TOKEN, WEBHOOK_SECRET
from tests.integration.conftest import runtime  # noqa: F401

TELEGRAM_MAX_BODY = 64 * 1024


class CountingIngest(Ingest):
    """An Ingest that remembers every event it published."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis)
        self.published: list[InboundEvent] = []

    async def submit(self, event: InboundEvent) -> Submitted:
        result = await super().submit(event)
        if result == Submitted.ACCEPTED:
            self.published.append(event)
        return result


@pytest.fixture
async def ingest(redis: Redis) -> CountingIngest:
    return CountingIngest(redis)


@pytest.fixture
async def web_channel(redis: Redis) -> WebChannel:
    ch = WebChannel(
        WebSettings(web_chat_enabled=True), ChannelDeps(redis=redis, pacer=Pacer(redis))
    )
    await ch.initialize()
    return ch


@pytest.fixture
async def app(
    redis: Redis, ingest: CountingIngest, web_channel: WebChannel
) -> AsyncIterator[httpx.AsyncClient]:
    """/telegram/webhook, /slack/events and the web chat API, one ASGI app."""
    from starlette.routing import Route

    bot = Bot(TOKEN)
    tg = make_endpoint(
        secret=WEBHOOK_SECRET,
        ingest=ingest,
        bot=lambda: bot,
        context=lambda: ParseContext(bot_id=str(BOT_ID), username=BOT_USERNAME),
        max_body_bytes=TELEGRAM_MAX_BODY,
    )
    slack = EventsEndpoint(
        SlackInbound(ingest, SlackState(redis, 3600), bot_user_id=lambda: BOT_USER),
        SIGNING_SECRET,
    )
    routes: list[Any] = [Route(PATH, tg, methods=["POST"])]  # type: ignore[arg-type]
    routes += slack.routes()
    routes += web_channel.routes(ingest)
    asgi = Starlette(routes=routes)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi, raise_app_exceptions=False),
        base_url="http://localhost",
    ) as client:
        yield client
