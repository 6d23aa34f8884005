"""In a group, /interrupt stops a turn only for its own person or an approver: a
stranger off the allow list (or another member) cannot cut off someone's answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_core.agent.interrupt import interrupt_filter
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, ToolCall
from tests.integration.agent.conftest import FnModel, user_event

GROUP = ThreadKey("telegram", "bot1", "-500")


def _slow_tool_then_answer(req: CompletionRequest) -> Completion:
    msgs = list(req.messages)
    if msgs[-1].role == "tool":
        return Completion("answer: " + msgs[-1].content)
    return Completion("", tool_calls=(ToolCall("c1", "sleepy", {"ms": 1500, "label": "slept"}),))


@pytest.mark.parametrize("who", ["mallory", "bob"])  # off the allow list / on it
async def test_someone_elses_interrupt_does_not_stop_a_turn(world: Any, who: str) -> None:
    w = world(
        FnModel(_slow_tool_then_answer),
        dm_policy="allowlist",
        allowed_users="telegram:alice,telegram:bob",
        group_reply="all",
    )
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(GROUP, "do the slow thing", user="alice", is_direct=False))
    await asyncio.sleep(0.5)  # Alice's turn is in its tool call
    await w.send(user_event(GROUP, "/interrupt", user=who, is_direct=False))
    await w.settle(GROUP, timeout=15)
    said = w.texts(GROUP)
    assert not any("Stopped" in t for t in said), said
    assert "answer: slept" in said, said


@pytest.mark.parametrize("who", ["alice", "boss"])  # the turn's own person / an approver
async def test_the_owners_or_an_approvers_interrupt_stops_it(world: Any, who: str) -> None:
    w = world(FnModel(_slow_tool_then_answer), approver_ids="telegram:boss", group_reply="all")
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(GROUP, "do the slow thing", user="alice", is_direct=False))
    await asyncio.sleep(0.5)
    await w.send(user_event(GROUP, "/interrupt", user=who, is_direct=False))
    await w.settle(GROUP, timeout=15)
    said = w.texts(GROUP)
    assert any("Stopped" in t for t in said), said
    assert "answer: slept" not in said, said
