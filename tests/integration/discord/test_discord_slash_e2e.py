"""Slash commands end to end: real Runtimes (gateway, worker, web) against the fake Discord.

The process holding the gateway registers Parley's commands as global application
commands (read first, written only when different); an invocation is echoed
within 3 s and answered by a worker with an ordinary message in its channel.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_core.agent.commands import builtin_commands
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from bots.settings import Settings
from channels.discord.channel import DiscordChannel
from tests.fakes.discord import APP_ID, BOT_ID, CHANNEL_ID, DM_CHANNEL_ID, TOKEN, FakeDiscord
from tests.fakes.discord_commands import invalid_form, stored_commands
from tests.integration.approvals_e2e.approvals_harness import (
    process,
    settle,
    wait_until,
)
from tests.integration.discord.runtime_stack import discord_settings, gateway, gateway_ready

COMMANDS = r"/applications/\d+/commands$"
LEGACY = {"name": "legacy", "description": "left by someone else", "type": 1}


def make_settings(valkey: EmbeddedValkey, fake: FakeDiscord, **platform: Any) -> Settings:
    return discord_settings(valkey, fake, **platform)


def registered(fake: FakeDiscord) -> list[str]:
    return sorted(c["name"] for c in fake.app_commands.get(APP_ID, []))


async def test_the_gateway_registers_the_commands_once(
    valkey: EmbeddedValkey, redis: Redis, fake_discord: FakeDiscord
) -> None:
    settings = make_settings(valkey, fake_discord)
    async with gateway(settings):
        await wait_until(lambda: registered(fake_discord), what="the commands registered")
    assert registered(fake_discord) == builtin_commands().names()
    new, model = fake_discord.command("new"), fake_discord.command("model")
    assert new is not None and model is not None
    assert new["type"] == 1 and "options" not in new
    assert new["description"] == "Start a new conversation (the old one is archived)"
    assert model["options"] == [{"type": 3, "name": "text", "description": "[name]"}]
    assert fake_discord.command_puts == 1
    # a restart reads the commands, finds them right and writes nothing
    async with gateway(settings):
        await fake_discord.wait_call("GET", COMMANDS, count=2)
        await settle()
    assert fake_discord.command_puts == 1
    assert registered(fake_discord) == builtin_commands().names()


async def test_a_changed_list_is_written_again(
    valkey: EmbeddedValkey, redis: Redis, fake_discord: FakeDiscord
) -> None:
    fake_discord.app_commands[APP_ID] = stored_commands(
        APP_ID, [LEGACY], [], fake_discord.snowflake
    )
    async with gateway(make_settings(valkey, fake_discord)):
        await wait_until(lambda: fake_discord.command_puts == 1, what="the overwrite")
    assert registered(fake_discord) == builtin_commands().names()  # "legacy" is gone


async def test_discord_commands_false_leaves_the_apps_commands(
    valkey: EmbeddedValkey, redis: Redis, fake_discord: FakeDiscord
) -> None:
    fake_discord.app_commands[APP_ID] = stored_commands(
        APP_ID, [LEGACY], [], fake_discord.snowflake
    )
    async with gateway(make_settings(valkey, fake_discord, discord_commands=False)):
        await settle(0.6)
    assert fake_discord.calls_to("GET", COMMANDS) == [] and fake_discord.command_puts == 0
    assert registered(fake_discord) == ["legacy"]
    # the same wait is long enough for a gateway that does register
    async with gateway(make_settings(valkey, fake_discord)):
        await settle(0.6)
    assert fake_discord.command_puts == 1 and "legacy" not in registered(fake_discord)


async def test_the_web_process_does_not_register(
    valkey: EmbeddedValkey, redis: Redis, fake_discord: FakeDiscord
) -> None:
    settings = make_settings(valkey, fake_discord)
    async with Runtime(settings, "web") as rt:
        assert rt._menu_task is not None
        await rt._menu_task  # the runtime handed the commands to the channel ...
        ch = rt.channels["discord"]
        assert isinstance(ch, DiscordChannel) and ch.command_names is not None
        await settle(0.6)
    # ... which, holding no gateway, left the application alone
    assert fake_discord.calls_to("GET", COMMANDS) == [] and fake_discord.command_puts == 0
    async with gateway(settings):
        await wait_until(lambda: registered(fake_discord), what="the gateway's registration")


async def test_a_refused_registration_is_a_warning_and_the_gateway_runs(
    valkey: EmbeddedValkey,
    redis: Redis,
    fake_discord: FakeDiscord,
    caplog: pytest.LogCaptureFixture,
) -> None:
    refused = invalid_form(
        {"0": {"name": {"_errors": [{"code": "APPLICATION_COMMAND_INVALID_NAME"}]}}}
    )
    fake_discord.fail("PUT", COMMANDS, 400, refused)
    with caplog.at_level(logging.WARNING):
        async with gateway(make_settings(valkey, fake_discord)) as rt:
            await wait_until(
                lambda: "could not register the slash commands" in caplog.text,
                what="the warning",
            )
            await fake_discord.user_message(CHANNEL_ID, "still there?", mention=True)
            assert rt.ingest is not None
            await wait_until(lambda: rt.ingest.counts["accepted"] == 1, what="the message")
            assert gateway_ready(rt)
    assert "50035" in caplog.text
    assert TOKEN not in caplog.text
    assert registered(fake_discord) == []


# --- invocations, answered by a worker -----------------------------------------------


@contextlib.asynccontextmanager
async def stack(valkey: EmbeddedValkey, fake: FakeDiscord) -> AsyncIterator[Runtime]:
    """A gateway process (commands registered) and a worker process; the worker."""
    settings = make_settings(valkey, fake)
    async with gateway(settings), process(settings, "worker") as worker:
        await wait_until(lambda: fake.command("status"), what="the commands registered")
        yield worker


def answers(fake: FakeDiscord, channel: str) -> list[str]:
    """What the bot posted in ``channel``, without the echoes of commands (type 20)."""
    msgs = fake.messages[channel].values()
    return [m["content"] for m in msgs if m["author"]["id"] == BOT_ID and m["type"] != 20]


async def echoed(fake: FakeDiscord, inter: dict[str, Any]) -> str:
    """The visible echo the interaction was answered with, within 3 s."""
    state = fake.interactions[inter["id"]]
    await wait_until(lambda: state["_answered"] is not None, timeout=3.0, what="the echo")
    assert state["_answered"]["latency"] < 3.0
    body = state["_answered"]["body"]
    assert body["type"] == 4 and "flags" not in body["data"]
    assert body["data"]["allowed_mentions"]["parse"] == []
    return str(body["data"]["content"])


@pytest.mark.parametrize("channel", [CHANNEL_ID, DM_CHANNEL_ID], ids=["guild", "dm"])
async def test_status_is_answered_by_the_agent_in_the_channel(
    valkey: EmbeddedValkey, redis: Redis, fake_discord: FakeDiscord, channel: str
) -> None:
    async with stack(valkey, fake_discord):
        inter = await fake_discord.slash(channel, "status")  # no @mention anywhere
        assert await echoed(fake_discord, inter) == "`/status`"
        (answer,) = await wait_until(lambda: answers(fake_discord, channel), what="the answer")
        assert "**State:** idle" in answer and "**Model:**" in answer
        await settle()
        assert len(answers(fake_discord, channel)) == 1


async def test_a_commands_text_reaches_the_agent(
    valkey: EmbeddedValkey, redis: Redis, fake_discord: FakeDiscord
) -> None:
    async with stack(valkey, fake_discord):
        inter = await fake_discord.slash(CHANNEL_ID, "model", "default")
        assert await echoed(fake_discord, inter) == "`/model default`"
        (answer,) = await wait_until(lambda: answers(fake_discord, CHANNEL_ID), what="answer")
        assert answer == "Back to the default model."  # not the list /model alone gives


async def test_the_same_interaction_twice_is_answered_once(
    valkey: EmbeddedValkey, redis: Redis, fake_discord: FakeDiscord
) -> None:
    async with stack(valkey, fake_discord):
        inter = await fake_discord.slash(CHANNEL_ID, "ping")
        await echoed(fake_discord, inter)
        await fake_discord.redeliver(inter)
        await fake_discord.wait_call("POST", rf"/interactions/{inter['id']}/", count=2)
        await wait_until(lambda: answers(fake_discord, CHANNEL_ID), what="the answer")
        await settle(0.6)
        assert len(answers(fake_discord, CHANNEL_ID)) == 1
