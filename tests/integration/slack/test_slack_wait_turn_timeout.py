"""A Slack wait for the platform (the Retry-After slack_sdk sleeps out, or the
one the outbox waits out for a message the answer needs) does not count toward
TURN_TIMEOUT_SECS: the turn used to be cancelled during it and the answer thrown
away (agent_core.deadline)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from agent_core.agent.interrupt import interrupt_filter
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, TokenUsage
from agent_core.store import keys
from agent_core.store.pacing import Pacer
from channels.slack.channel import SlackChannel
from channels.slack.client import RETRY_MAX_WAIT, PacedRateLimitRetryHandler, channel_pace
from tests.fakes.slack import TEAM, FakeSlack
from tests.integration.agent.conftest import (
    FnModel,
    last_user,
    user_event,
    world,  # noqa: F401  (the fixture)
)


async def test_a_retry_after_is_off_the_turns_clock(
    world: Callable[..., Any],  # noqa: F811
    fake_slack: FakeSlack,
    slack: SlackChannel,
) -> None:
    root = fake_slack.add_user_message("C1", "question").ts
    thread = ThreadKey("slack", TEAM, "C1", root)
    model = FnModel(lambda req: Completion("answer: " + last_user(req), usage=TokenUsage(1, 1)))
    w = world(model, turn_timeout_secs=1.0)  # scaled: 600 s, and a longer Retry-After
    w.outboxes["slack"] = w.outbox = slack.outbox()
    fake_slack.rate_limit("chat.postMessage", times=2, retry_after=1)  # 2 s of waits
    await w.start()
    await w.send(user_event(thread, "hi", user="U1"))
    await w.settle(thread, timeout=20.0)
    posted = [m.text for m in fake_slack.thread("C1", root) if m.text.startswith("answer")]
    assert posted == ["answer: hi"], posted  # not "That took longer than 1 seconds…"


async def _paused_channel_answer(
    w: Any, fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel], redis: Redis
) -> tuple[SlackChannel, ThreadKey]:
    """An answer in a channel another worker's 429 paused for 300 s (a long
    Retry-After): the answer is not slept out in the outbox's pacing slot."""
    slack = channel_factory(slack_channel_pace_secs=0.05)
    await slack.initialize()
    root = fake_slack.add_user_message("C1", "question").ts
    thread = ThreadKey("slack", TEAM, "C1", root)
    w.outboxes["slack"] = w.outbox = slack.outbox()
    await Pacer(redis).pause(channel_pace("C1"), 300.0)
    await w.start()
    await w.send(user_event(thread, "hi", user="U1"))
    for _ in range(500):
        if len(w.model.requests) == 1:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)  # (the answer waits for the channel)
    return slack, thread


async def test_interrupt_ends_the_wait_for_a_long_paused_channel(
    world: Callable[..., Any],  # noqa: F811
    fake_slack: FakeSlack,
    channel_factory: Callable[..., SlackChannel],
    redis: Redis,
) -> None:
    w = world(FnModel(lambda req: Completion("answer: " + last_user(req))))
    w.ingest.add_filter(interrupt_filter(w.redis))
    slack, thread = await _paused_channel_answer(w, fake_slack, channel_factory, redis)
    try:
        await w.send(user_event(thread, "/interrupt", user="U1"))
        await w.settle(thread, timeout=15.0)  # not after the 300 s
        posted = [m.text for m in fake_slack.thread("C1", thread.thread)]
        assert not any(t.startswith("answer") for t in posted), posted
    finally:
        await slack.shutdown()


async def test_a_stop_during_a_long_paused_channel_hands_the_turn_back(
    world: Callable[..., Any],  # noqa: F811
    fake_slack: FakeSlack,
    channel_factory: Callable[..., SlackChannel],
    redis: Redis,
) -> None:
    w = world(FnModel(lambda req: Completion("answer: " + last_user(req))), shutdown_grace_secs=30)
    slack, thread = await _paused_channel_answer(w, fake_slack, channel_factory, redis)
    try:
        stopping = asyncio.ensure_future(w.stop())
        done, _ = await asyncio.wait({stopping}, timeout=10)
        held = await w.redis.get(keys.lock(thread))
        if not done:
            await stopping
        assert done, "the drain waited out the whole grace: the wait ignored the stop"
        assert held is not None and held.endswith(b"~later"), held
        assert await w.redis.llen(keys.mailbox(thread)) == 1
    finally:
        await slack.shutdown()


async def test_slack_sdk_sleeps_no_retry_after_longer_than_a_minute() -> None:
    """slack_sdk slept any Retry-After inside the call, where nothing could end
    it; a longer one than RETRY_MAX_WAIT is now the caller's (SendRateLimited for
    the outbox, waited out by the reply writer)."""
    handler = PacedRateLimitRetryHandler(None)
    request = HttpRequest(
        method="POST", url="https://slack.example/api/chat.postMessage", headers={}
    )

    async def retries(secs: int) -> bool:
        response = HttpResponse(status_code=429, headers={"Retry-After": [str(secs)]})
        return await handler._can_retry_async(
            state=RetryState(), request=request, response=response
        )

    assert await retries(int(RETRY_MAX_WAIT))
    assert not await retries(3600)
