"""Real Runtimes against the fake Discord: settings, readiness, the gateway process.

Shared by the end-to-end tests that run Parley's processes (approvals, slash
commands, attachments, shard sets).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import channels.discord as discord_pkg
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from bots.settings import Settings
from channels.discord.channel import DiscordChannel
from channels.discord.settings import DiscordSettings
from tests.fakes.discord import FakeDiscord
from tests.integration.approvals_e2e.approvals_harness import process, settings_for, wait_until


def discord_settings(
    valkey: EmbeddedValkey, fake: FakeDiscord, core: dict[str, Any] | None = None, **platform: Any
) -> Settings:
    """Discord on, pointed at ``fake``, unpaced (``platform`` overrides DISCORD_*)."""
    values: dict[str, Any] = {
        "discord_bot_token": fake.token,
        "discord_api_base_url": fake.api_base,
        "discord_gateway_url": fake.gateway_url,
        "discord_guild_ready_timeout": 0.05,
        "discord_reidentify_delay": 0.0,
        "discord_channel_pace_secs": 0.0,
        "discord_global_pace_secs": 0.0,
        **platform,
    }
    return settings_for(valkey, "discord", DiscordSettings(**values), discord_pkg, **(core or {}))


def gateway_ready(rt: Runtime) -> bool:
    ch = rt.channels["discord"]
    assert isinstance(ch, DiscordChannel)
    client = ch.client
    return client is not None and client.is_ready() and client.catchups > 0


@contextlib.asynccontextmanager
async def gateway(settings: Settings) -> AsyncIterator[Runtime]:
    """The gateway process (role gateway), connected and ready."""
    async with process(settings, "gateway") as rt:
        await wait_until(lambda: gateway_ready(rt), what="the Discord gateway to be ready")
        yield rt
