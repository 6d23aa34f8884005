"""A channel where the bot may read but not post: real Runtimes against the fake Discord."""

from __future__ import annotations

import logging

import pytest
from redis.asyncio import Redis

from agent_core.errors import SendForbidden
from agent_core.events import OutboundMessage, ThreadKey
from agent_core.store.embedded import EmbeddedValkey
from channels.discord.sender import DiscordOutbox
from tests.fakes.discord import CHANNEL_ID, GUILD_ID, FakeDiscord
from tests.integration.approvals_e2e.approvals_harness import process, settle
from tests.integration.discord.runtime_stack import discord_settings, gateway

MISSING_PERMISSIONS = {"message": "Missing Permissions", "code": 50013}
MISSING_ACCESS = {"message": "Missing Access", "code": 50001}
POSTS = rf"/channels/{CHANNEL_ID}/messages$"


async def test_missing_permissions_is_tried_once_and_logged_as_one_clear_line(
    valkey: EmbeddedValkey,
    redis: Redis,
    fake_discord: FakeDiscord,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The answer's post is refused (403, 50013): the turn is skipped with one warning
    naming Discord's message, the channel and the permission, no traceback, and no
    failure notice posted into the channel that refused the answer (a second 403)."""
    caplog.set_level(logging.INFO)
    fake_discord.fail("POST", POSTS, 403, MISSING_PERMISSIONS, times=100)
    fake_discord.fail(
        "POST", rf"/channels/{CHANNEL_ID}/typing$", 403, MISSING_PERMISSIONS, times=100
    )
    settings = discord_settings(valkey, fake_discord)
    async with gateway(settings), process(settings, "worker"):
        await fake_discord.user_message(CHANNEL_ID, "hello there", mention=True)
        await fake_discord.wait_call("POST", POSTS)
        await settle(3.0)
    assert len(fake_discord.calls_to("POST", POSTS)) == 1
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in problems if r.exc_info], "a traceback for a missing permission"
    told = [
        r.getMessage()
        for r in problems
        if "50013" in r.getMessage() and "Missing Permissions" in r.getMessage()
    ]
    assert len(told) == 1, [r.getMessage() for r in problems]
    assert CHANNEL_ID in told[0] and "Send Messages" in told[0]


async def test_missing_access_names_view_channel(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    fake_discord.fail("POST", POSTS, 403, MISSING_ACCESS)
    with pytest.raises(SendForbidden) as caught:
        await outbox.send(ThreadKey("discord", GUILD_ID, CHANNEL_ID, ""), OutboundMessage("hi"))
    text = str(caught.value)
    assert "Missing Access" in text and "View Channel" in text and CHANNEL_ID in text
