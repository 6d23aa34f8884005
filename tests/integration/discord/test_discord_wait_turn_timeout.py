"""A Discord wait for the platform (a 429 that discord.py sleeps out, a channel
pace another worker paused) does not count toward TURN_TIMEOUT_SECS: the turn
used to be cancelled during it and the answer thrown away
(agent_core.deadline)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_core.deadline import turn_deadline
from agent_core.errors import SendRateLimited
from agent_core.events import OutboundMessage, ThreadKey
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


async def test_a_skipped_streamed_edit_does_not_move_the_turn_deadline(
    fake_discord: FakeDiscord, outbox: DiscordOutbox
) -> None:
    """A streamed (droppable) edit that meets a 429 is skipped after
    STREAMED_EDIT_WAIT, yet the http trace hook moved the turn's deadline back by
    the whole retry_after (in the abandoned edit's task, which had copied the turn's
    ContextVar): a slow model streaming into a rate-limited channel never reached
    TURN_TIMEOUT_SECS.  The edit's task now runs outside the turn's deadline."""
    ref = await outbox.send(THREAD, OutboundMessage("preview", final=False))
    fake_discord.rate_limit("PATCH", rf"/channels/{CHANNEL_ID}/messages/\d+$", 20.0)
    async with asyncio.timeout(1000) as tm:
        with turn_deadline(tm):
            before = tm.when()
            assert before is not None
            await outbox.edit(ref, OutboundMessage("preview, longer", final=False))
            moved = (tm.when() or 0) - before
    assert moved < 1.0, f"a skipped streamed edit moved the turn's deadline by {moved:.1f}s"


async def test_a_long_paused_pace_asks_for_what_is_left_of_the_pause(
    outbox: DiscordOutbox, redis: Redis
) -> None:
    """The SendRateLimited of a pace paused beyond DISCORD_MAX_RETRY_WAIT carries
    what is left of the pause (it carried DISCORD_MAX_RETRY_WAIT, 30 s: a longer
    pause was waited out in steps of 30 s)."""
    await Pacer(redis).pause(channel_pace(CHANNEL_ID), 100.0)  # another worker's 429
    with pytest.raises(SendRateLimited) as caught:
        await outbox.send(THREAD, OutboundMessage("answer"))
    assert 90.0 < caught.value.retry_after <= 100.0, caught.value.retry_after
