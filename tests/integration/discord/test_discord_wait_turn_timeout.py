"""A Discord wait for the platform (a 429 that discord.py sleeps out, a channel
pace another worker paused) does not count toward TURN_TIMEOUT_SECS: the turn
used to be cancelled during it and the answer thrown away
(agent_core.deadline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, TokenUsage
from agent_core.store.pacing import Pacer
from channels.discord.sender import DiscordOutbox, channel_pace
from tests.fakes.discord import CHANNEL_ID, GUILD_ID, FakeDiscord
from tests.integration.agent.conftest import (
    FnModel,
    last_user,
    user_event,
    world,  # noqa: F401  (the fixture)
)

THREAD = ThreadKey("discord", GUILD_ID, CHANNEL_ID, "")


def _answers(fake: FakeDiscord) -> list[str]:
    shown = fake.messages.get(CHANNEL_ID, {}).values()
    return [m["content"] for m in shown if str(m.get("content", "")).startswith("answer")]


async def _run(w: Any, fake: FakeDiscord) -> list[str]:
    await w.start()
    await w.send(user_event(THREAD, "hi", user="u1"))
    await w.settle(THREAD, timeout=20.0)
    return _answers(fake)


async def test_a_429_discord_sleeps_out_is_off_the_turns_clock(
    world: Callable[..., Any],  # noqa: F811
    fake_discord: FakeDiscord,
    outbox: DiscordOutbox,
) -> None:
    model = FnModel(lambda req: Completion("answer: " + last_user(req), usage=TokenUsage(1, 1)))
    w = world(model, turn_timeout_secs=1.0)  # scaled: 600 s, and a wait under 30 s
    w.outboxes["discord"] = w.outbox = outbox
    fake_discord.rate_limit("POST", rf"/channels/{CHANNEL_ID}/messages$", 2.0)
    assert await _run(w, fake_discord) == ["answer: hi"]


async def test_a_pace_another_worker_paused_is_off_the_turns_clock(
    world: Callable[..., Any],  # noqa: F811
    fake_discord: FakeDiscord,
    outbox: DiscordOutbox,
    redis: Redis,
) -> None:
    model = FnModel(lambda req: Completion("answer: " + last_user(req), usage=TokenUsage(1, 1)))
    w = world(model, turn_timeout_secs=1.0)
    w.outboxes["discord"] = w.outbox = outbox
    await Pacer(redis).pause(channel_pace(CHANNEL_ID), 2.0)  # another worker's 429
    assert await _run(w, fake_discord) == ["answer: hi"]
