"""Gateway processes and shard sets: one lease per shard set (docs/discord.md, Sharding)."""

from __future__ import annotations

import asyncio
from typing import Any

import channels.discord as discord_pkg
from agent_core.store.embedded import EmbeddedValkey
from bots.settings import Settings
from channels.discord.settings import DiscordSettings
from tests.fakes.discord import FakeDiscord
from tests.integration.approvals_e2e.approvals_harness import process, settings_for, wait_until


def make_settings(valkey: EmbeddedValkey, fake: FakeDiscord, shards: str) -> Settings:
    discord = DiscordSettings(
        discord_bot_token=fake.token,  # type: ignore[arg-type]
        discord_api_base_url=fake.api_base,
        discord_gateway_url=fake.gateway_url,
        discord_guild_ready_timeout=0.05,
        discord_reidentify_delay=0.0,
        discord_shards=shards,
    )
    return settings_for(valkey, "discord", discord, discord_pkg)


def shards(fake: FakeDiscord) -> list[Any]:
    return sorted(tuple(i["shard"]) for i in fake.identifies)


async def test_two_processes_with_their_own_shard_sets_both_connect(
    valkey: EmbeddedValkey, fake_discord: FakeDiscord
) -> None:
    first = make_settings(valkey, fake_discord, "0/2")
    second = make_settings(valkey, fake_discord, "1/2")
    async with process(first, "gateway"), process(second, "gateway"):
        await wait_until(lambda: len(fake_discord.identifies) >= 2, what="both shard sets")
    assert shards(fake_discord) == [(0, 2), (1, 2)]


async def test_two_processes_with_the_same_set_are_one_running_one_standing_by(
    valkey: EmbeddedValkey, fake_discord: FakeDiscord
) -> None:
    settings = make_settings(valkey, fake_discord, "2")
    async with process(settings, "gateway"), process(settings, "gateway"):
        await wait_until(lambda: fake_discord.identifies, what="the first gateway")
        await asyncio.sleep(1.0)  # room for a (wrong) second connection
        assert shards(fake_discord) == [(0, 2), (1, 2)]  # one process, both shards
