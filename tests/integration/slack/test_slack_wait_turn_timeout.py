"""A Slack wait for the platform (the Retry-After slack_sdk sleeps out, or the
one the outbox waits out for a message the answer needs) does not count toward
TURN_TIMEOUT_SECS: the turn used to be cancelled during it and the answer thrown
away (agent_core.deadline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, TokenUsage
from channels.slack.channel import SlackChannel
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
