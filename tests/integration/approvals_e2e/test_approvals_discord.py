"""Approvals end to end on Discord: real Runtimes (gateway + worker), real discord.py, fake Discord.

The gateway process holds the websocket; a press reaches the persistent
``ApprovalButton`` DynamicItem, is published and the interaction deferred
(DEFERRED_UPDATE_MESSAGE) within Discord's 3 s.  A separate worker process
decides; anything the presser alone should read is an ephemeral follow-up on
the interaction's webhook.  The tests check what the fake Discord shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from approvals_harness import (
    ASK,
    RAN,
    demo_runs,
    process,
    settle,
    turn_finished,
    wait_expired,
    wait_until,
)
from redis.asyncio import Redis

from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from bots.settings import Settings
from channels.discord.channel import DiscordChannel
from tests.fakes.discord import ALICE, BOB, BOT_ID, CHANNEL_ID, DM_CHANNEL_ID, FakeDiscord
from tests.integration.discord.runtime_stack import discord_settings, gateway

EPHEMERAL = 64
DEFERRED_UPDATE_MESSAGE = 6


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    server = await FakeDiscord().start()
    yield server
    await server.stop()


def make_settings(valkey: EmbeddedValkey, fake: FakeDiscord, **core: Any) -> Settings:
    return discord_settings(valkey, fake, core, discord_stream_interval=0.2)


@contextlib.asynccontextmanager
async def stack(settings: Settings) -> AsyncIterator[Runtime]:
    """A gateway process and a worker process (two Runtimes on the same Redis); the worker."""
    async with gateway(settings), process(settings, "worker") as worker:
        yield worker


class Conversation:
    """Alice mentions the bot in #general (or writes to it in a DM); it answers there."""

    def __init__(self, fake: FakeDiscord, worker: Runtime, channel: str = CHANNEL_ID) -> None:
        self.fake = fake
        self.worker = worker
        self.channel = channel
        self.prompt_id = ""
        self.custom_ids: dict[str, str] = {}
        self.since = ""  # the user's message: what the bot says comes after it

    async def ask(self) -> dict[str, Any]:
        msg = await self.fake.user_message(self.channel, ASK, mention=self.channel == CHANNEL_ID)
        self.since = msg["id"]
        prompt = await wait_until(self._prompt, what="the approval prompt")
        await turn_finished(self.worker)
        self.prompt_id = prompt["id"]
        (row,) = prompt["components"]
        self.custom_ids = {c["label"]: c["custom_id"] for c in row["components"]}
        assert list(self.custom_ids) == ["Approve", "Always", "Deny"]
        return prompt

    def _prompt(self) -> dict[str, Any] | None:
        return next((m for m in self.bot_messages() if m.get("components")), None)

    def bot_messages(self) -> list[dict[str, Any]]:
        msgs = self.fake.messages[self.channel].values()
        return [m for m in msgs if m["author"]["id"] == BOT_ID]

    @property
    def prompt(self) -> dict[str, Any]:
        return self.fake.messages[self.channel][self.prompt_id]

    def texts(self) -> list[str]:
        return [str(m["content"]) for m in self.bot_messages()]

    async def press(self, label: str = "Approve", user: dict[str, Any] = ALICE) -> dict[str, Any]:
        return await self.fake.press(self.prompt_id, self.custom_ids[label], user=user)

    async def deferred(self, inter: dict[str, Any]) -> dict[str, Any]:
        """The interaction's initial response (must be a deferral, within 3 s)."""
        state = self.fake.interactions[inter["id"]]
        await wait_until(lambda: state["_answered"] is not None, what="the deferral")
        answered: dict[str, Any] = state["_answered"]
        assert answered["body"] == {"type": DEFERRED_UPDATE_MESSAGE}
        assert answered["latency"] < 3.0
        return answered

    def followups(self, inter: dict[str, Any]) -> list[dict[str, Any]]:
        """Ephemeral follow-ups sent on the interaction's webhook."""
        path = re.escape(f"/webhooks/{inter['application_id']}/{inter['token']}")
        return [c.json for c in self.fake.calls_to("POST", path) if c.status < 300]


@pytest.mark.parametrize("channel", [CHANNEL_ID, DM_CHANNEL_ID], ids=["guild", "dm"])
async def test_requester_press_runs_the_tool_once(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeDiscord, channel: str
) -> None:
    async with stack(make_settings(valkey, fake)) as worker:
        chat = Conversation(fake, worker, channel)
        await chat.ask()
        press = await chat.press("Approve")
        await chat.deferred(press)  # acknowledged
        await wait_until(lambda: chat.prompt["components"] == [], what="the buttons removed")
        assert "Approved" in chat.prompt["content"]
        await wait_until(lambda: any(RAN in t for t in chat.texts()), what="the tool's result")
        await settle()
        assert chat.followups(press) == []  # the decision is the prompt's edit; no notice
    assert await demo_runs(redis) == 1
    assert len([t for t in chat.texts() if RAN in t]) == 1


async def test_someone_elses_press_is_refused_privately(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeDiscord
) -> None:
    async with stack(make_settings(valkey, fake)) as worker:
        chat = Conversation(fake, worker)
        prompt = await chat.ask()
        before = chat.texts()
        press = await chat.press("Approve", user=BOB)
        await chat.deferred(press)
        (notice,) = await wait_until(lambda: chat.followups(press), what="the private notice")
        assert "can decide" in notice["content"] and notice["flags"] == EPHEMERAL
        await settle()
        assert chat.prompt["components"] == prompt["components"]  # buttons stay
        assert chat.prompt["content"] == prompt["content"]
        assert chat.texts() == before
    assert await demo_runs(redis) == 0


async def test_double_press_runs_once(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeDiscord
) -> None:
    async with stack(make_settings(valkey, fake)) as worker:
        chat = Conversation(fake, worker)
        await chat.ask()
        first = await chat.press("Approve")
        second = await chat.press("Approve")
        await chat.deferred(first)
        await chat.deferred(second)
        (notice,) = await wait_until(lambda: chat.followups(second), what="the late notice")
        assert "Already decided" in notice["content"] and notice["flags"] == EPHEMERAL
        await wait_until(lambda: any(RAN in t for t in chat.texts()), what="the tool's result")
        await settle()
        assert chat.followups(first) == []
        assert chat.prompt["components"] == [] and "Approved" in chat.prompt["content"]
    assert await demo_runs(redis) == 1
    assert len([t for t in chat.texts() if RAN in t]) == 1


async def test_press_after_expiry_runs_nothing(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeDiscord
) -> None:
    async with stack(make_settings(valkey, fake, approval_ttl_secs=1)) as worker:
        chat = Conversation(fake, worker)
        await chat.ask()
        await wait_expired(redis)
        press = await chat.press("Approve")
        await chat.deferred(press)
        (notice,) = await wait_until(lambda: chat.followups(press), what="the notice")
        assert "expired" in notice["content"]
        await wait_until(lambda: chat.prompt["components"] == [], what="the prompt closed")
        assert "Expired" in chat.prompt["content"]
        await settle()
    assert await demo_runs(redis) == 0
    assert not any(RAN in t for t in chat.texts())


async def test_press_after_a_restart_uses_the_persistent_button(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeDiscord
) -> None:
    async with stack(make_settings(valkey, fake)) as worker:
        chat = Conversation(fake, worker)
        await chat.ask()
    identifies = len(fake.identifies)
    # gateway and worker are gone; new ones (a new discord.py client that never
    # sent this prompt) take the press through the DynamicItem template
    async with stack(make_settings(valkey, fake)):
        assert len(fake.identifies) > identifies
        press = await chat.press("Approve")
        await chat.deferred(press)
        await wait_until(lambda: chat.prompt["components"] == [], what="the buttons removed")
        assert "Approved" in chat.prompt["content"]
        await wait_until(lambda: any(RAN in t for t in chat.texts()), what="the tool's result")
        await settle()
    assert await demo_runs(redis) == 1


async def test_press_is_deferred_within_3s_without_a_worker(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeDiscord
) -> None:
    settings = make_settings(valkey, fake)
    async with stack(settings) as worker:
        chat = Conversation(fake, worker)
        await chat.ask()
    async with gateway(settings):
        # no worker runs: the deferral must not wait for the decision
        press = await chat.press("Approve")
        await chat.deferred(press)
        await settle()
        assert chat.prompt["components"] != [] and await demo_runs(redis) == 0
        async with process(settings, "worker"):
            await wait_until(lambda: chat.prompt["components"] == [], what="the decision")
            assert "Approved" in chat.prompt["content"]
            await wait_until(lambda: any(RAN in t for t in chat.texts()), what="the result")
            await settle()
    assert await demo_runs(redis) == 1


async def test_notice_survives_a_slow_deferral(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker may answer a press before the gateway's deferral reached Discord.

    The gateway publishes the press first and defers after (nothing is acknowledged
    before it is durable), so on a slow link to Discord the worker's ephemeral
    follow-up can come first, when Discord does not know the interaction yet.
    """
    settings = make_settings(valkey, fake)
    async with gateway(settings) as gw, process(settings, "worker") as worker:
        ch = gw.channels["discord"]
        assert isinstance(ch, DiscordChannel) and ch.client is not None
        http = ch.client.http
        original = http.request

        async def slow_callback(route: Any, **kwargs: Any) -> Any:
            if route.path.endswith("/callback"):
                await asyncio.sleep(1.0)  # a slow network leg, still within Discord's 3 s
            return await original(route, **kwargs)

        monkeypatch.setattr(http, "request", slow_callback)
        chat = Conversation(fake, worker)
        await chat.ask()
        press = await chat.press("Approve", user=BOB)
        await chat.deferred(press)
        (notice,) = await wait_until(lambda: chat.followups(press), what="the private notice")
        assert "can decide" in notice["content"]
    assert await demo_runs(redis) == 0
