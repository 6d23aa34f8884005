"""Telegram flood control longer than the turn timeout still delivers the answer.

docs/telegram.md §6 promises the answer "once the wait Telegram asked for is over
(however long)", and the sender sleeps any ``retry_after`` inside the turn.  The
turn runs under TURN_TIMEOUT_SECS (600 s by default) while real bots get
``retry after 3600``: the turn was cancelled, the answer (paid for) thrown away
and the person told "That took longer than 600 seconds".  The wait is now off
the turn's clock (agent_core.deadline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, TokenUsage
from channels.telegram import TelegramChannel
from tests.fakes.telegram import FakeTelegram
from tests.integration.agent.conftest import (
    FnModel,
    last_user,
    user_event,
    world,  # noqa: F401  (the fixture)
)

DM = ThreadKey("telegram", "123456", "42")


async def test_a_retry_after_longer_than_the_turn_timeout_still_delivers_the_answer(
    world: Callable[..., Any],  # noqa: F811
    fake: FakeTelegram,
    channel: TelegramChannel,
) -> None:
    model = FnModel(lambda req: Completion("answer: " + last_user(req), usage=TokenUsage(1, 1)))
    # scaled down: TURN_TIMEOUT_SECS 600 and a retry_after of 3600 s
    w = world(model, turn_timeout_secs=1.0)
    w.outboxes["telegram"] = w.outbox = channel.outbox()
    fake.fail_next("sendMessage", 429, retry_after=2)
    await w.start()
    await w.send(user_event(DM, "hi", user="42"))
    await w.settle(DM, timeout=20.0)
    texts = [c.params["text"] for c in fake.calls_of("sendMessage") if c.status == 200]
    assert texts == ["answer: hi"], texts  # not "That took longer than 1 seconds…"
    assert len(model.requests) == 1
