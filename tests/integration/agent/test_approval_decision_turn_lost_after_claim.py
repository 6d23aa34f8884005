"""A decision turn that is given up after the claim (TURN_TIMEOUT_SECS, or any
error that makes the worker skip the event).

The claim and the tool's side effects are in Redis / the world, but the session
is put back as it was before the turn: still AWAITING_APPROVAL on an approval
that is already decided.  The next message must tell the model what happened
(the call ran, its result), not "not run: the approval request expired", and the
history must keep exactly one result per call.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.agent.session import ThreadState
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest
from tests.integration.agent.approval_helpers import add_tool, approval_id, press
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("telegram", "bot1", "lost")


class SlowAfterTool(FnModel):
    """Answers like tools_then_answer; slow on the call after a tool result while ``slow``."""

    slow = True

    async def complete(self, request: CompletionRequest) -> Completion:
        if self.slow and request.messages[-1].role == "tool":
            await asyncio.sleep(3)
        return await super().complete(request)


async def timed_out_decision(world: Any) -> tuple[Any, SlowAfterTool, str]:
    model = SlowAfterTool(tools_then_answer(("count it", [call("counter", label="x")])))
    w = world(model, turn_timeout_secs=1.0)
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    aid = approval_id(w, T)

    await w.send(press(T, f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 1  # the approved call ran
    assert any("took longer" in t for t in w.texts(T))  # the decision turn was given up
    return w, model, aid


async def test_next_message_after_a_timed_out_decision_turn_reports_the_truth(world: Any) -> None:
    w, model, aid = await timed_out_decision(world)

    s = await w.session(T)
    # the approval is decided and its call ran: the thread must not still wait for it
    stuck = s.state == ThreadState.AWAITING_APPROVAL and s.pending_approval == aid

    model.slow = False
    await w.send(user_event(T, "did it work?"))
    await w.settle(T)
    seen = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert await w.counter() == 1
    assert not any("not run" in c for c in seen), (
        f"model told the approved (and executed) call did not run: {seen}; "
        f"session was stuck awaiting the decided approval: {stuck}"
    )


async def test_history_stays_valid_after_a_timed_out_decision_turn(world: Any) -> None:
    """Every tool call must have exactly one result (providers reject duplicates)."""
    w, model, _aid = await timed_out_decision(world)
    model.slow = False
    await w.send(user_event(T, "did it work?"))
    await w.settle(T)
    s = await w.session(T)
    answered = [m.tool_call_id for m in s.history if m.role == "tool"]
    calls = [c.id for m in s.history for c in m.tool_calls]
    assert sorted(answered) == sorted(calls), (
        f"tool results {answered} for calls {calls}: "
        f"{[(m.role, m.content[:40]) for m in s.history]}"
    )


async def test_always_on_a_tool_that_forbids_it_never_sticks_through_a_given_up_turn(
    world: Any,
) -> None:
    """A tool with allow_always = False (run_shell) pressed "Always", and that decision
    turn given up: settling it afterwards must not put the tool in always_approved,
    so later calls still ask, each of them."""
    from tests.integration.agent.conftest import Counter

    class NoAlways(Counter):
        name = "noalways"
        allow_always = False

    model = SlowAfterTool(
        tools_then_answer(
            ("count it", [call("noalways", label="x")]),
            ("count twice", [call("noalways", label="y"), call("noalways", label="z")]),
        )
    )
    w = world(model, turn_timeout_secs=1.0)
    add_tool(w, NoAlways())
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    await w.send(press(T, f"ap:{approval_id(w, T)}:w"))  # Always
    await w.settle(T)
    assert any("took longer" in t for t in w.texts(T))  # the decision turn was given up
    model.slow = False
    await w.send(user_event(T, "hello"))
    await w.settle(T)
    assert not (await w.session(T)).always_approved
    await w.send(user_event(T, "count twice"))
    await w.settle(T)
    await w.send(press(T, f"ap:{approval_id(w, T)}:a"))
    await w.settle(T)
    assert await w.counter("z") == 0  # the second call asks too
    assert len(w.prompts(T)) == 3
