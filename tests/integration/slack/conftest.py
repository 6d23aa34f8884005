"""Fixtures: the fake Slack, a SlackChannel built against it, the ASGI app with /slack/events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette

import channels.slack
from agent_core.events import InboundEvent
from agent_core.ingest import Ingest
from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings, load
from agent_core.store import keys
from agent_core.store.pacing import Pacer
from bots.settings import Settings
from channels.base import ChannelDeps
from channels.slack.channel import SlackChannel
from channels.slack.settings import SlackSettings
from channels.web.channel import WebSettings
from tests.fakes.slack import FakeSlack
from tests.integration.conftest import serving  # noqa: F401  (the Slack tests import it from here)


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    yield fake
    await fake.stop()


def make_settings(fake: FakeSlack, **overrides: object) -> SlackSettings:
    values: dict[str, object] = {
        "slack_bot_token": fake.bot_token,
        "slack_signing_secret": fake.signing_secret,
        "slack_app_token": fake.app_token,
        "slack_api_base_url": fake.api_url,
        "slack_channel_pace_secs": 0.0,
        "slack_stream_interval": 0.2,
        "slack_socket_ping_interval": 0.2,
    }
    values.update(overrides)
    return load(SlackSettings, **values)


@pytest.fixture
def slack_settings(fake_slack: FakeSlack) -> SlackSettings:
    return make_settings(fake_slack)


@pytest.fixture
def channel_factory(fake_slack: FakeSlack, redis: Redis) -> Callable[..., SlackChannel]:
    def build(group_reply: str = "mention", **overrides: object) -> SlackChannel:
        deps = ChannelDeps(redis=redis, pacer=Pacer(redis), group_reply=group_reply)
        return SlackChannel(make_settings(fake_slack, **overrides), deps)

    return build


@pytest.fixture
async def slack(channel_factory: Callable[..., SlackChannel]) -> AsyncIterator[SlackChannel]:
    ch = channel_factory()
    await ch.initialize()
    yield ch
    await ch.shutdown()


@pytest.fixture
def ingest(redis: Redis) -> Ingest:
    return Ingest(redis)


@pytest.fixture
async def app(slack: SlackChannel, ingest: Ingest) -> AsyncIterator[httpx.AsyncClient]:
    asgi = Starlette(routes=slack.routes(ingest))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi), base_url="http://parley.test"
    ) as client:
        yield client


Published = Callable[[], Awaitable[list[InboundEvent]]]


@pytest.fixture
def published(redis: Redis) -> Published:
    """Every event in the inbox stream (parley:inbox), in order."""

    async def read() -> list[InboundEvent]:
        entries = await redis.xrange(keys.INBOX_STREAM)
        return [InboundEvent.from_json(fields[b"e"]) for _, fields in entries]

    return read


def runtime_settings(
    valkey_url: str, slack: SlackSettings, llm_url: str, *, vision: bool = False, **core: Any
) -> Settings:
    """Settings for a real Runtime: Slack on, the fake LLM server as an OpenAI model;
    channels answer anyone (GROUP_POLICY=open) unless the test says otherwise."""
    core.setdefault("group_policy", "open")
    return Settings(
        core=CoreSettings(redis_url=valkey_url, **core),  # type: ignore[arg-type]
        llm=LLMSettings(
            llm_backend="openai_compatible",
            llm_base_url=llm_url,
            llm_model="gpt-4o",
            llm_vision=vision,
        ),
        web=WebSettings(web_chat_enabled=False),
        platforms={"slack": slack},
        modules={"slack": channels.slack},
    )
