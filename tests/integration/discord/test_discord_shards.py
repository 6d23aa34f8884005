"""Gateway processes and shard sets: one lease per shard set (docs/discord.md, Sharding)."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.store.embedded import EmbeddedValkey
from bots.settings import Settings
from tests.fakes.discord import FakeDiscord
from tests.integration.approvals_e2e.approvals_harness import process, wait_until
from tests.integration.discord.runtime_stack import discord_settings


def make_settings(valkey: EmbeddedValkey, fake: FakeDiscord, shards: str) -> Settings:
    return discord_settings(valkey, fake, discord_shards=shards)


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
