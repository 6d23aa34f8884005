"""Approvals end to end on Slack: real Runtimes (web + worker), real slack_sdk, fake Slack.

The web process takes the signed Events API and interactivity POSTs and only
publishes; a separate worker process decides.  A press is acknowledged by the
HTTP 200 to the interactivity POST (Slack wants it within 3 s); anything the
presser alone should read arrives as ``chat.postEphemeral``.  The tests check
what the fake Slack shows: the prompt's text and blocks, the ephemerals.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from approvals_harness import (
    ASK,
    RAN,
    demo_runs,
    process,
    settings_for,
    settle,
    turn_finished,
    wait_expired,
    wait_until,
)
from redis.asyncio import Redis

import channels.slack as slack_pkg
from agent_core.events import EventKind, InboundEvent
from agent_core.store import keys
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from bots.settings import Settings
from channels.slack.parse import is_dm
from channels.slack.settings import SlackSettings
from tests.fakes.slack import FakeSlack, Message

CHANNEL = "C1"
USER = "U1"
STRANGER = "U2"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    server = FakeSlack()
    await server.start()
    yield server
    await server.stop()


def make_settings(valkey: EmbeddedValkey, fake: FakeSlack, **core: Any) -> Settings:
    platform = SlackSettings(
        slack_bot_token=fake.bot_token,  # type: ignore[arg-type]
        slack_signing_secret=fake.signing_secret,  # type: ignore[arg-type]
        slack_api_base_url=fake.api_url,
        slack_channel_pace_secs=0.0,
        slack_stream_interval=0.2,
    )
    return settings_for(valkey, "slack", platform, slack_pkg, **core)


@contextlib.asynccontextmanager
async def web(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The web process (role web): a client posting to its ASGI app."""
    async with process(settings, "web") as rt:
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:
            yield client


@contextlib.asynccontextmanager
async def stack(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    """A web process and a worker process (two Runtimes on the same Redis)."""
    async with web(settings) as client, process(settings, "worker") as worker:
        yield client, worker


def has_buttons(m: Message) -> bool:
    return any(b.get("type") == "actions" for b in m.blocks)


class Conversation:
    """The user's mention in #C1 and the thread Parley answers in (or a DM, top level)."""

    def __init__(
        self, fake: FakeSlack, stack: tuple[httpx.AsyncClient, Runtime], channel: str = CHANNEL
    ) -> None:
        self.fake = fake
        self.client, self.worker = stack
        self.channel = channel
        self.root = ""
        self.prompt_ts = ""

    async def deliver(self, body: dict[str, Any], *, form: bool = False) -> httpx.Response:
        resp = await self.fake.deliver(self.client, body, form=form)
        assert resp.status_code == 200, resp.text
        return resp

    async def ask(self) -> Message:
        if is_dm(self.channel):
            body = self.fake.message(self.channel, ASK, user=USER)
        else:
            body = self.fake.message(self.channel, f"<@UBOT> {ASK}", user=USER, kind="app_mention")
            self.root = body["event"]["ts"]
        await self.deliver(body)
        prompt = await wait_until(self._prompt, what="the approval prompt")
        await turn_finished(self.worker)
        self.prompt_ts = prompt.ts
        labels = [
            el["text"]["text"]
            for b in prompt.blocks
            if b["type"] == "actions"
            for el in b["elements"]
        ]
        assert labels == ["Approve", "Always", "Deny"]
        return prompt

    def _prompt(self) -> Message | None:
        return next((m for m in self.fake.thread(self.channel, self.root) if has_buttons(m)), None)

    @property
    def prompt(self) -> Message:
        return self.fake.messages[(self.channel, self.prompt_ts)]

    def press(self, label: str = "Approve", user: str = USER) -> dict[str, Any]:
        payload = self.fake.press(self.channel, self.prompt_ts, label, user=user)
        # every real press has its own action_ts (the press's event id): never share one
        payload["actions"][0]["action_ts"] = f"{time.time():.6f}{len(self.fake.calls)}"
        return payload

    def texts(self) -> list[str]:
        return [m.text for m in self.fake.thread(self.channel, self.root)]

    def ephemerals(self, user: str) -> list[str]:
        return [e["text"] for e in self.fake.ephemerals if e["user"] == user]


@pytest.mark.parametrize("channel", [CHANNEL, "D1"], ids=["channel-thread", "dm"])
async def test_requester_press_runs_the_tool_once(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeSlack, channel: str
) -> None:
    async with stack(make_settings(valkey, fake)) as both:
        chat = Conversation(fake, both, channel)
        await chat.ask()
        await chat.deliver(chat.press("Approve"), form=True)  # acknowledged: HTTP 200
        await wait_until(lambda: not has_buttons(chat.prompt), what="the prompt's buttons removed")
        assert "Approved" in chat.prompt.text
        await wait_until(lambda: any(RAN in t for t in chat.texts()), what="the tool's result")
        await settle()
        assert chat.ephemerals(USER) == []  # the decision is the prompt's edit; no notice
    assert await demo_runs(redis) == 1
    assert len([t for t in chat.texts() if RAN in t]) == 1


async def test_someone_elses_press_is_refused_privately(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeSlack
) -> None:
    async with stack(make_settings(valkey, fake)) as both:
        chat = Conversation(fake, both)
        prompt = await chat.ask()
        before = chat.texts()
        await chat.deliver(chat.press("Approve", user=STRANGER), form=True)
        (notice,) = await wait_until(lambda: chat.ephemerals(STRANGER), what="the notice")
        assert "can decide" in notice
        await settle()
        assert chat.prompt.blocks == prompt.blocks and chat.prompt.edits == 0  # buttons stay
        assert chat.texts() == before
        assert chat.ephemerals(USER) == []
    assert await demo_runs(redis) == 0


async def test_double_press_runs_once(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeSlack
) -> None:
    async with stack(make_settings(valkey, fake)) as both:
        chat = Conversation(fake, both)
        await chat.ask()
        first, second = chat.press("Approve"), chat.press("Approve")
        await chat.deliver(first, form=True)
        await chat.deliver(second, form=True)
        (notice,) = await wait_until(lambda: chat.ephemerals(USER), what="the late press's notice")
        assert "Already decided" in notice
        await wait_until(lambda: any(RAN in t for t in chat.texts()), what="the tool's result")
        await settle()
        assert not has_buttons(chat.prompt) and "Approved" in chat.prompt.text
        assert len(chat.ephemerals(USER)) == 1
    assert await demo_runs(redis) == 1
    assert len([t for t in chat.texts() if RAN in t]) == 1


async def test_press_after_expiry_runs_nothing(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeSlack
) -> None:
    async with stack(make_settings(valkey, fake, approval_ttl_secs=1)) as both:
        chat = Conversation(fake, both)
        await chat.ask()
        await wait_expired(redis)
        await chat.deliver(chat.press("Approve"), form=True)
        (notice,) = await wait_until(lambda: chat.ephemerals(USER), what="the notice")
        assert "expired" in notice
        await wait_until(lambda: not has_buttons(chat.prompt), what="the prompt closed")
        assert "Expired" in chat.prompt.text
        await settle()
    assert await demo_runs(redis) == 0
    assert not any(RAN in t for t in chat.texts())


async def test_press_after_a_restart(valkey: EmbeddedValkey, redis: Redis, fake: FakeSlack) -> None:
    async with stack(make_settings(valkey, fake)) as both:
        chat = Conversation(fake, both)
        await chat.ask()
    # every process is gone; new ones on the same Redis take the press
    async with stack(make_settings(valkey, fake)) as (client, _worker):
        chat.client = client
        await chat.deliver(chat.press("Approve"), form=True)
        await wait_until(lambda: not has_buttons(chat.prompt), what="the prompt's buttons removed")
        assert "Approved" in chat.prompt.text
        await wait_until(lambda: any(RAN in t for t in chat.texts()), what="the tool's result")
        await settle()
    assert await demo_runs(redis) == 1


async def test_press_is_acked_at_once_and_decided_through_the_bus(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeSlack
) -> None:
    settings = make_settings(valkey, fake)
    async with stack(settings) as both:
        chat = Conversation(fake, both)
        await chat.ask()
    # only the web process runs: the press is acknowledged (200) and published, no more
    async with web(settings) as client:
        chat.client = client
        began = time.monotonic()
        await chat.deliver(chat.press("Approve"), form=True)
        assert time.monotonic() - began < 3.0  # Slack's limit for the acknowledgement
        entries = await redis.xrange(keys.INBOX_STREAM)
        event = InboundEvent.from_json(entries[-1][1][b"e"])
        assert event.kind == EventKind.ACTION and event.user_id == USER
        assert event.action is not None and event.action.token.startswith("ap:")
        assert event.thread.thread == chat.root
        await settle()
        assert has_buttons(chat.prompt) and chat.prompt.edits == 0
        assert await demo_runs(redis) == 0
        # a worker comes up and takes the published press
        async with process(settings, "worker"):
            await wait_until(lambda: not has_buttons(chat.prompt), what="the decision")
            assert "Approved" in chat.prompt.text
            await wait_until(lambda: any(RAN in t for t in chat.texts()), what="the result")
            await settle()
    assert await demo_runs(redis) == 1
    assert fake.calls_to("chat.postEphemeral", ok=None) == []
