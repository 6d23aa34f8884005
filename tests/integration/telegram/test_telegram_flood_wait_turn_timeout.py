"""Telegram flood control longer than the turn timeout still delivers the answer.

docs/telegram.md §6 promises the answer "once the wait Telegram asked for is over
(however long)", and the sender sleeps any ``retry_after`` inside the turn.  The
turn runs under TURN_TIMEOUT_SECS (600 s by default) while real bots get
``retry after 3600``: the turn was cancelled, the answer (paid for) thrown away
and the person told "That took longer than 600 seconds".  The wait is now off
the turn's clock (agent_core.deadline).

And a flood wait longer than TELEGRAM_MAX_RETRY_WAIT is no longer slept inside
the sender, where neither /interrupt nor a stopping worker could end it (a turn
held its thread and a worker for the whole hour, and a deploy waited out its
grace, then cancelled the turn with no hold: another worker ran it again at
once): SendRateLimited goes to the turn's reply writer, which waits it out."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from agent_core.agent.interrupt import interrupt_filter
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, TokenUsage
from agent_core.store import keys
from channels.telegram import TelegramChannel
from tests.fakes.telegram import FakeTelegram
from tests.integration.agent.conftest import (
    FnModel,
    last_user,
    user_event,
    world,  # noqa: F401  (the fixture)
)
from tests.integration.telegram.conftest import FAST, make_channel

DM = ThreadKey("telegram", "123456", "42")


def _model() -> FnModel:
    return FnModel(lambda req: Completion("answer: " + last_user(req), usage=TokenUsage(1, 1)))


def _sent(fake: FakeTelegram) -> list[str]:
    """The texts of the messages Telegram took (sendMessage answered 200)."""
    return [c.params["text"] for c in fake.calls_of("sendMessage") if c.status == 200]


async def _answered_once_past_the_turn_timeout(
    world: Callable[..., Any],  # noqa: F811
    fake: FakeTelegram,
    channel: TelegramChannel,
) -> None:
    """A turn timeout of 1 s and a retry_after of 2 s on the answer: the answer is
    still sent, once, from one model call."""
    model = _model()
    w = world(model, turn_timeout_secs=1.0)
    w.outboxes["telegram"] = w.outbox = channel.outbox()
    fake.fail_next("sendMessage", 429, retry_after=2)
    await w.start()
    await w.send(user_event(DM, "hi", user="42"))
    await w.settle(DM, timeout=20.0)
    texts = _sent(fake)
    assert texts == ["answer: hi"], texts  # not "That took longer than 1 seconds…"
    assert len(model.requests) == 1


async def test_a_retry_after_longer_than_the_turn_timeout_still_delivers_the_answer(
    world: Callable[..., Any],  # noqa: F811
    fake: FakeTelegram,
    channel: TelegramChannel,
) -> None:
    # scaled down: TURN_TIMEOUT_SECS 600 and a retry_after of 3600 s
    await _answered_once_past_the_turn_timeout(world, fake, channel)


async def _limited(fake: FakeTelegram) -> None:
    for _ in range(500):
        if any(c.method == "sendMessage" and c.status == 429 for c in fake.calls):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the answer never met the 429")


async def test_a_retry_after_beyond_the_senders_wait_is_waited_out_by_the_turn(
    world: Callable[..., Any],  # noqa: F811
    fake: FakeTelegram,
    redis: Redis,
) -> None:
    """Scaled: TELEGRAM_MAX_RETRY_WAIT 0.5 s, a retry_after of 2 s, a turn timeout
    of 1 s: the reply writer waits (off the turn's clock) and sends once."""
    ch = await make_channel(fake, redis, limits=dataclasses.replace(FAST, max_retry_wait=0.5))
    try:
        await _answered_once_past_the_turn_timeout(world, fake, ch)
    finally:
        await ch.shutdown()


async def test_interrupt_ends_a_telegram_flood_wait(
    world: Callable[..., Any],  # noqa: F811
    fake: FakeTelegram,
    channel: TelegramChannel,
) -> None:
    """Scaled: a retry_after of 300 s stands for Telegram's 3600."""
    w = world(_model())
    w.outboxes["telegram"] = w.outbox = channel.outbox()
    w.ingest.add_filter(interrupt_filter(w.redis))
    fake.fail_next("sendMessage", 429, retry_after=300)
    await w.start()
    await w.send(user_event(DM, "hi", user="42"))
    await _limited(fake)
    await w.send(user_event(DM, "/interrupt", user="42"))
    await w.settle(DM, timeout=15.0)  # not after the 300 s Telegram asked for
    texts = _sent(fake)
    assert not any(t.startswith("answer") for t in texts), texts


async def test_a_stop_during_a_telegram_flood_wait_hands_the_turn_back(
    world: Callable[..., Any],  # noqa: F811
    fake: FakeTelegram,
    channel: TelegramChannel,
) -> None:
    w = world(_model(), shutdown_grace_secs=30)
    w.outboxes["telegram"] = w.outbox = channel.outbox()
    fake.fail_next("sendMessage", 429, retry_after=300)
    await w.start()
    await w.send(user_event(DM, "hi", user="42"))
    await _limited(fake)
    await asyncio.sleep(0.2)  # (the turn is in its wait)
    stopping = asyncio.ensure_future(w.stop())
    done, _ = await asyncio.wait({stopping}, timeout=10)
    held = await w.redis.get(keys.lock(DM))
    if not done:
        await stopping  # (lets the grace run out so the fixture can clean up)
    assert done, "the drain waited out the whole grace: the flood wait ignored the stop"
    assert held is not None and held.endswith(b"~later"), held  # no rerun into the wait
    assert 200_000 < await w.redis.pttl(keys.lock(DM)) <= 300_000
    assert await w.redis.llen(keys.mailbox(DM)) == 1  # the message stays queued


async def test_a_chat_paused_for_long_is_waited_out_where_interrupt_ends_it(
    world: Callable[..., Any],  # noqa: F811
    fake: FakeTelegram,
    channel: TelegramChannel,
    redis: Redis,
) -> None:
    """A chat another worker paused for a long flood wait: not slept in the
    sender's pacing slot either."""
    w = world(_model())
    w.outboxes["telegram"] = w.outbox = channel.outbox()
    w.ingest.add_filter(interrupt_filter(w.redis))
    outbox = channel.outbox()
    for key, _ in outbox._paces(42):
        if ":chat:" in key:
            await outbox._pacer.pause(key, 300)
    await w.start()
    await w.send(user_event(DM, "hi", user="42"))
    for _ in range(500):
        if len(w.model.requests) == 1:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)  # (the answer waits for its slot)
    await w.send(user_event(DM, "/interrupt", user="42"))
    await w.settle(DM, timeout=15.0)
    texts = _sent(fake)
    assert not any(t.startswith("answer") for t in texts), texts
