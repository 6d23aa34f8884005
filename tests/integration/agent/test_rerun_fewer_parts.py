"""A rerun whose answer comes in fewer parts than the dead execution's removes the
parts it did not write again.

A worker dies after sending two reply parts of a turn (the text streamed with a tool
call, then the answer) and before completing it.  The rerun's model answers in one
part (models are not deterministic): part 0 is edited into the new answer.  What the
user saw before: part 1, the dead execution's answer, stayed on screen below it, two
answers to one message, and its record stayed in the thread's ``sent`` hash (no TTL)
for good.  Now the turn's end deletes it on the platform (``Outbox.delete``), or, on
a channel that cannot delete, edits it to a short note; its record goes with the
completion.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_core.agent.reply import RETIRED_NOTE
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, ToolCall
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, user_event
from tests.integration.agent.crash import die_before_completion, replace_worker
from tests.integration.test_delivery import wait_for


@pytest.mark.parametrize("can_delete", [True, False])
async def test_a_rerun_with_fewer_parts_removes_the_dead_executions_extra_part(
    world: Any, can_delete: bool
) -> None:
    phase = {"rerun": False}

    def rule(req: CompletionRequest) -> Completion:
        if phase["rerun"]:
            return Completion("answer v2")
        if req.messages[-1].role == "user":
            return Completion("Looking it up…", tool_calls=(ToolCall("c1", "sleepy", {"ms": 0}),))
        return Completion("answer v1")

    w = world(FnModel(rule))
    w.outbox.stream_interval = 0.0  # a streaming channel (Telegram, Slack, Discord)
    if not can_delete:
        w.outbox.delete = None  # a channel without Outbox.delete (the web chat)
    await w.start()
    sent_two = die_before_completion(w)  # dies before its completion, like a SIGKILL
    t = ThreadKey("telegram", "bot1", "77")
    await w.send(user_event(t, "what is the weather?", eid="q1"))
    await asyncio.wait_for(sent_two.wait(), 10)
    assert w.texts(t) == ["Looking it up…", "answer v1"]
    phase["rerun"] = True
    await replace_worker(w)  # it reruns the turn once the lock expires
    await wait_for(lambda: any("v2" in x for x in w.texts(t)), 15)
    await w.settle(t)
    if can_delete:
        assert w.texts(t) == ["answer v2"]
    else:
        assert w.texts(t) == ["answer v2", RETIRED_NOTE]
    assert not [f for f in await w.redis.hkeys(keys.sent(t)) if f.startswith(b"q1")]
