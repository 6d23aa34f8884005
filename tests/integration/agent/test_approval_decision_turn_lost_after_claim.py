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

from redis.exceptions import ConnectionError as RedisConnectionError

from agent_core.agent.approvals import ApprovalStore
from agent_core.agent.session import ThreadState
from agent_core.agent.turn_approvals import CUT_OFF
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, TokenUsage, ToolCall
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


class SlowOnFirstResult(FnModel):
    """Slow (past TURN_TIMEOUT_SECS) on the first model call after a tool result."""

    slowed = False

    async def complete(self, request: CompletionRequest) -> Completion:
        c = self.rule(request)
        self.requests.append(request)
        if not self.slowed and request.messages[-1].role == "tool":
            self.slowed = True
            await asyncio.sleep(5)
        return c


async def test_a_call_an_always_covered_in_a_given_up_turn_keeps_its_result(world: Any) -> None:
    """ "Always" on counter(a) lets counter(b) of the same response run without a
    prompt (recorded on a's approval); that turn is then given up (TURN_TIMEOUT_SECS).
    Settling the wait later reads b's record: the model is told b's real result, not
    "not run" (which, b being covered by Always, it would run again unasked)."""
    ids = {"n": 0}

    def rule(req: CompletionRequest) -> Completion:
        m = req.messages[-1]
        ids["n"] += 1
        if m.role == "user" and m.content == "count twice":
            return Completion(
                "",
                tool_calls=(
                    ToolCall("c_a", "counter", {"label": "a"}),
                    ToolCall("c_b", "counter", {"label": "b"}),
                ),
            )
        told = {x.tool_call_id: x.content for x in req.messages if x.role == "tool"}
        if m.role == "user" and m.content == "go on" and "not run" in told.get("c_b", ""):
            # the model does what it was told was not done
            return Completion(
                "", tool_calls=(ToolCall(f"c_b{ids['n']}", "counter", {"label": "b"}),)
            )
        return Completion("ok", usage=TokenUsage(1, 1))

    w = world(SlowOnFirstResult(rule), turn_timeout_secs=1.5)
    await w.start()
    await w.send(user_event(T, "count twice"))
    await w.settle(T)
    await w.send(press(T, f"ap:{approval_id(w, T)}:w"))  # Always: a runs, b (covered) too
    await w.settle(T)
    assert await w.counter("a") == 1 and await w.counter("b") == 1
    assert any("took longer" in t for t in w.texts(T))  # the decision turn was given up
    await w.send(user_event(T, "go on"))
    await w.settle(T)
    s = await w.session(T)
    results = {m.tool_call_id: m.content for m in s.history if m.role == "tool"}
    assert "not run" not in results["c_b"], results
    assert results["c_b"] == "counted b -> 1", results
    assert await w.counter("b") == 1  # not run a second time


async def _three_asked(world: Any) -> tuple[Any, str, list[str]]:
    """Three counter calls of one response waiting for approval: the world, the
    first approval's id and the calls' ids (in order)."""
    w = world(
        FnModel(
            tools_then_answer(
                (
                    "count thrice",
                    [
                        call("counter", label="a"),
                        call("counter", label="b"),
                        call("counter", label="c"),
                    ],
                )
            )
        )
    )
    await w.start()
    await w.send(user_event(T, "count thrice"))
    await w.settle(T)
    s = await w.session(T)
    return w, approval_id(w, T), list(s.resume["queue"])


def _results(history: Any) -> dict[str, str]:
    return {m.tool_call_id: m.content for m in history if m.role == "tool"}


async def test_a_given_up_decision_reports_each_queued_call_as_recorded(world: Any) -> None:
    """A decision turn given up after its records were written (as a crash past its
    retries leaves them): the decided call's result is kept; a covered call marked
    started without a result may or may not have run; a call never started was not
    run."""
    w, aid, (ca, cb, cc) = await _three_asked(world)
    store = w.workers[0][0].agent.approvals
    await store.claim(T, aid, "always", "telegram:u1", "U1", "gone-turn")
    await store.mark_started(T, aid)
    await store.store_result(T, aid, "counted a -> 1")
    await store.mark_started(T, aid, cb)  # b was started, then the turn died
    await w.send(user_event(T, "did it work?"))
    await w.settle(T)
    s = await w.session(T)
    assert s.state == ThreadState.IDLE
    results = _results(s.history)
    assert results[ca] == "counted a -> 1"
    assert results[cb] == CUT_OFF
    assert results[cc] == "error: not run: the turn was stopped"


async def test_an_approved_call_never_started_is_reported_not_run(world: Any) -> None:
    """The decision turn was given up after its claim but before it started the call:
    the model is told it was not run, not that it "may or may not have run"."""
    w, aid, (ca, cb, cc) = await _three_asked(world)
    store = w.workers[0][0].agent.approvals
    await store.claim(T, aid, "approve", "telegram:u1", "U1", "gone-turn")
    await w.send(user_event(T, "did it work?"))
    await w.settle(T)
    results = _results((await w.session(T)).history)
    assert await w.counter("a") == 0
    assert results[ca] == "error: not run: the turn was stopped", results
    assert results[cb] == results[cc] == "error: not run: the turn was stopped"


async def test_a_redis_blip_on_the_result_write_keeps_the_result(
    world: Any, monkeypatch: Any
) -> None:
    """The one write recording an approved call's result fails once (a dropped
    connection): it is tried again, so the call that ran is reported as it ran, not
    as "may or may not have run" by a rerun."""
    w = world(FnModel(tools_then_answer(("count it", [call("counter", label="x")]))))
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    aid = approval_id(w, T)
    real = ApprovalStore.store_result
    blips = {"n": 0}

    async def flaky(
        self: Any, thread: Any, approval_id: str, result: str, call_id: str = ""
    ) -> None:
        if blips["n"] == 0:  # the connection drops once, right after the tool ran
            blips["n"] += 1
            raise RedisConnectionError("Connection reset by peer")
        await real(self, thread, approval_id, result, call_id)

    monkeypatch.setattr(ApprovalStore, "store_result", flaky)
    await w.send(press(T, f"ap:{aid}:a"))
    await w.settle(T, 20)
    assert blips["n"] == 1
    assert await w.counter() == 1
    assert w.texts(T)[-1] == "done: counted x -> 1", w.texts(T)[-1]
    a = await w.workers[0][0].agent.approvals.load(T, aid)
    assert a is not None and a.result == "counted x -> 1"


async def test_a_redis_blip_on_a_covered_calls_result_write_keeps_it(
    world: Any, monkeypatch: Any
) -> None:
    """The same for a call an "Always" let run without a prompt (run_covered)."""
    w, aid, (_ca, cb, _cc) = await _three_asked(world)
    real = ApprovalStore.store_result
    blips = {"n": 0}

    async def flaky(
        self: Any, thread: Any, approval_id: str, result: str, call_id: str = ""
    ) -> None:
        if call_id == cb and blips["n"] == 0:
            blips["n"] += 1
            raise RedisConnectionError("Connection reset by peer")
        await real(self, thread, approval_id, result, call_id)

    monkeypatch.setattr(ApprovalStore, "store_result", flaky)
    await w.send(press(T, f"ap:{aid}:w"))  # Always: a, then b and c covered
    await w.settle(T, 20)
    assert blips["n"] == 1
    assert [await w.counter(x) for x in "abc"] == [1, 1, 1]
    assert w.texts(T)[-1] == "done: counted a -> 1 | counted b -> 1 | counted c -> 1"
    assert await w.workers[0][0].agent.approvals.call_record(T, aid, cb) == (True, "counted b -> 1")
