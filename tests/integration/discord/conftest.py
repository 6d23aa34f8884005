"""Fixtures: the fake Discord, settings pointing at it, a running gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from discord_harness import Gateway, wait_client_ready
from redis.asyncio import Redis

from agent_core.ingest import Ingest
from agent_core.store.pacing import Pacer
from channels.base import ChannelDeps
from channels.discord import create
from channels.discord.channel import DiscordChannel
from channels.discord.sender import DiscordOutbox
from channels.discord.settings import DiscordSettings
from tests.fakes.discord import FakeDiscord


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    fake = await FakeDiscord().start()
    yield fake
    await fake.stop()


@pytest.fixture
def make_settings(fake_discord: FakeDiscord) -> Callable[..., DiscordSettings]:
    def make(**overrides: Any) -> DiscordSettings:
        values: dict[str, Any] = {
            "discord_bot_token": fake_discord.token,
            "discord_api_base_url": fake_discord.api_base,
            "discord_gateway_url": fake_discord.gateway_url,
            "discord_guild_ready_timeout": 0.05,
            "discord_reidentify_delay": 0.0,
            "discord_channel_pace_secs": 0.0,
            "discord_global_pace_secs": 0.0,
        }
        values.update(overrides)
        return DiscordSettings(**values)

    return make


@pytest.fixture
def make_gateway(
    redis: Redis, make_settings: Callable[..., DiscordSettings]
) -> Callable[..., Gateway]:
    def make(group_reply: str = "mention", **overrides: Any) -> Gateway:
        deps = ChannelDeps(redis=redis, pacer=Pacer(redis), group_reply=group_reply)
        channel = create(make_settings(**overrides), deps)
        assert isinstance(channel, DiscordChannel)
        return Gateway(channel, Ingest(redis), redis)

    return make


@pytest.fixture
async def gateway(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> AsyncIterator[Gateway]:
    gw = make_gateway()
    await gw.start()
    await fake_discord.wait_ready()
    await wait_client_ready(gw)
    yield gw
    await gw.halt()
    await gw.channel.shutdown()


@pytest.fixture
async def outbox(
    redis: Redis, make_settings: Callable[..., DiscordSettings]
) -> AsyncIterator[DiscordOutbox]:
    """A worker's Discord sender, pointed at the fake."""
    box = DiscordOutbox(make_settings(), Pacer(redis))
    yield box
    await box.close()
