"""In a group, /interrupt stops a turn only for its own person or an approver: a
stranger off the allow list (or another member) cannot cut off someone's answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_core.agent.interrupt import interrupt_filter
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, ToolCall
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

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


async def test_someone_elses_interrupt_is_told_whose_turn_it_was(world: Any) -> None:
    """Bob's /interrupt while Alice's turn runs does not stop it, and says why (not
    "Nothing is running right now.")."""
    w = world(FnModel(_slow_tool_then_answer), group_reply="all")
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(GROUP, "slow", user="alice", is_direct=False))
    await asyncio.sleep(0.5)
    await w.send(user_event(GROUP, "/interrupt", user="bob", is_direct=False))
    await w.settle(GROUP, timeout=15)
    said = w.texts(GROUP)
    assert "answer: slept" in said, said
    assert said[-1] == "Only ALICE or an approver can stop this turn.", said


async def test_a_leftover_stop_flag_does_not_let_others_cancel_an_approval(world: Any) -> None:
    """Alice's turn is stopped but her /stop never runs (rate limited), so the
    "already stopped" flag stays; Bob's /interrupt later must still be refused on
    Alice's pending approval, not cancel it."""
    w = world(
        FnModel(
            tools_then_answer(
                ("ALICE: slow", [call("sleepy", ms=3000, label="z")]),  # as a group's
                ("ALICE: count it", [call("counter", label="x")]),  # text reads
            )
        ),
        group_reply="all",
        user_rate_limit="2/minute",
    )
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(GROUP, "slow", user="alice", is_direct=False))
    await asyncio.sleep(0.6)
    await w.send(user_event(GROUP, "hmm", user="alice", is_direct=False))  # 2nd of 2/minute
    await w.send(user_event(GROUP, "/stop", user="alice", is_direct=False))  # rate limited
    await w.settle(GROUP, timeout=15)
    assert (await w.redis.get(keys.interrupt(GROUP))) == b"x|telegram:alice"
    w.clock.offset = 120  # the rate window passed
    await w.send(user_event(GROUP, "count it", user="alice", is_direct=False))
    await w.settle(GROUP)
    await w.send(user_event(GROUP, "/interrupt", user="bob", is_direct=False))
    await w.settle(GROUP)
    s = await w.session(GROUP)
    assert s.state == "awaiting_approval", w.texts(GROUP)
    assert "only ALICE or an approver can cancel it" in w.texts(GROUP)[-1], w.texts(GROUP)
