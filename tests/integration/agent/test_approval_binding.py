"""Which decision binds to which approval, and for whom "Always" holds.

A typed yes counts only for a prompt already shown when it was sent; "Always" is one
person's; a call an "Always" covers runs at most once; a decision on an approval
whose turn was given up, or whose record is gone, ends the wait instead of leaving
the conversation stuck; a tool that asks every time never offers or records Always.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import replace
from typing import Any

from agent_core.agent.session import ThreadState
from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, TokenUsage, ToolCall
from agent_core.store import keys
from tests.integration.agent.approval_helpers import (
    add_slow_tool,
    add_tool,
    approval_id,
    counted,
    press,
)
from tests.integration.agent.conftest import Counter, FnModel, user_event
from tests.integration.agent.test_approval_decision_turn_lost_after_claim import (
    T as LOST_T,
)
from tests.integration.agent.test_approval_decision_turn_lost_after_claim import (
    timed_out_decision,
)

_n = itertools.count(1)


def model(table: dict[str, list[tuple[str, dict[str, Any]]]]) -> FnModel:
    """A user text ending with a trigger -> those calls; after tool results -> done."""

    def rule(req: CompletionRequest) -> Completion:
        m = req.messages[-1]
        if m.role == "tool":
            results = [x.content for x in req.messages if x.role == "tool"]
            return Completion("done: " + " | ".join(results[-3:]), usage=TokenUsage(10, 5))
        for trigger, calls in table.items():
            if m.role == "user" and m.content.endswith(trigger):
                return Completion(
                    "", tool_calls=tuple(ToolCall(f"c{next(_n)}", n, a) for n, a in calls)
                )
        return Completion("echo: " + m.content, usage=TokenUsage(10, 5))

    return FnModel(rule)


def group_event(thread: ThreadKey, text: str, user: str, **kw: Any) -> Any:
    return user_event(thread, text, user, is_direct=False, **kw)


class Gated(FnModel):
    """Answers only once ``gate`` is set: the test decides what arrives meanwhile."""

    def __init__(self, inner: FnModel) -> None:
        super().__init__(inner.rule)
        self.gate = asyncio.Event()

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        await self.gate.wait()
        return self.rule(request)


async def _until(check: Any, what: str) -> None:
    for _ in range(400):
        if await check():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"never: {what}")


async def test_an_ok_sent_before_the_prompt_approves_nothing(world: Any) -> None:
    t = ThreadKey("telegram", "bot1", "early-ok")
    m = Gated(model({"count it": [("counter", {"label": "x"})]}))
    w = world(m)
    await w.start()
    await w.send(user_event(t, "count it"))

    async def thinking() -> bool:
        return len(m.requests) == 1

    await _until(thinking, "the turn asks the model")  # no prompt yet
    assert not w.prompts(t)
    await w.send(user_event(t, "ok"))  # an acknowledgement, not a decision

    async def arrived() -> bool:
        return await w.redis.get(keys.seq(t)) == b"2"

    await _until(arrived, "the ok is taken in")
    m.gate.set()  # only now the model answers, with the call that needs the prompt
    await w.settle(t, 15)
    assert await w.counter("x") == 0
    assert any("came before I asked about **counter**" in x for x in w.texts(t))
    s = await w.session(t)
    assert s.state == ThreadState.AWAITING_APPROVAL  # the prompt still waits
    await w.send(user_event(t, "yes"))  # typed after the prompt: it counts
    await w.settle(t)
    assert await w.counter("x") == 1


async def test_a_yes_typed_with_a_press_does_not_approve_the_next_prompt(world: Any) -> None:
    t = ThreadKey("telegram", "bot1", "yes-next")
    w = world(model({"do both": [("counter", {"label": "a"}), ("counter", {"label": "b"})]}))
    await w.start()
    await w.send(user_event(t, "do both"))
    await w.settle(t)
    aid = approval_id(w, t)
    await w.send(press(t, f"ap:{aid}:a"))  # the press and a typed yes, both for prompt 1
    await w.send(user_event(t, "yes"))
    await w.settle(t)
    assert await w.counter("a") == 1
    assert await w.counter("b") == 0  # its prompt came after the yes
    assert len(w.prompts(t)) == 2
    second = approval_id(w, t)
    await w.send(user_event(t, f"/approve {second}"))  # naming it: seen, so it counts
    await w.settle(t)
    assert await w.counter("b") == 1


async def test_always_in_a_group_is_the_pressers_own(world: Any) -> None:
    g = ThreadKey("telegram", "bot1", "-500")
    w = world(model({"count it": [("counter", {"label": "x"})]}), group_reply="all")
    await w.start()
    await w.send(group_event(g, "count it", "alice"))
    await w.settle(g)
    prompt = w.prompts(g)[0].message.text
    assert "Always (this tool, for " in prompt  # whose requests it covers
    aid = approval_id(w, g)
    await w.send(press(g, f"ap:{aid}:w", "alice"))
    await w.settle(g)
    assert await w.counter("x") == 1
    await w.send(group_event(g, "count it", "bob"))  # Bob's call: asked, not run
    await w.settle(g)
    assert len(w.prompts(g)) == 2 and await w.counter("x") == 1
    await w.send(press(g, f"ap:{approval_id(w, g)}:d", "bob"))
    await w.settle(g)
    await w.send(group_event(g, "count it", "alice"))  # Alice's: runs without asking
    await w.settle(g)
    assert len(w.prompts(g)) == 2 and await w.counter("x") == 2
    s = await w.session(g)
    assert s.always_tools("telegram:alice") == {"counter"}
    assert s.always_tools("telegram:bob") == set()


async def test_a_call_an_always_covers_is_not_run_again_by_a_rerun(world: Any) -> None:
    t = ThreadKey("telegram", "bot1", "always-twice")
    calls = [("slowask", {"label": "a", "ms": 100}), ("slowask", {"label": "b", "ms": 2000})]
    w = world(model({"post both": calls}), shutdown_grace_secs=0.3)
    add_slow_tool(w)
    await w.start()
    await w.send(user_event(t, "post both"))
    await w.settle(t)
    await w.send(press(t, f"ap:{approval_id(w, t)}:w"))  # b then runs without asking

    async def b_started() -> bool:
        return bool(await w.redis.get("test:started:b"))

    await _until(b_started, "b starts")
    await w.stop()  # a shutdown past its grace while b runs: the press is rerun
    await w.start()
    await w.settle(t, 15)
    assert await counted(w, "test:started:a") == 1
    assert await counted(w, "test:started:b") == 1
    assert "may or may not have run" in str((await w.session(t)).history)


async def test_a_decision_after_a_given_up_turn_ends_the_wait(world: Any) -> None:
    w, slow_model, _aid = await timed_out_decision(world)
    slow_model.slow = False
    await w.send(user_event(LOST_T, "yes"))
    await w.settle(LOST_T)
    assert any("Already decided (approved)" in x for x in w.texts(LOST_T))
    s = await w.session(LOST_T)
    assert s.state != ThreadState.AWAITING_APPROVAL and not s.pending_approval
    assert await w.counter() == 1  # it ran once, and only once


async def test_a_decision_on_an_approval_whose_record_is_gone_ends_the_wait(world: Any) -> None:
    t = ThreadKey("telegram", "bot1", "gone")
    w = world(model({"count it": [("counter", {"label": "x"})]}))
    await w.start()
    await w.send(user_event(t, "count it"))
    await w.settle(t)
    await w.send(user_event(t, "and meanwhile"))  # held until the decision
    await w.settle(t)
    await w.redis.delete(keys.approval(t, approval_id(w, t)))  # its Redis TTL ran out
    await w.send(user_event(t, "yes"))
    await w.settle(t)
    assert any("expired, so nothing was run" in x for x in w.texts(t))
    s = await w.session(t)
    assert s.state != ThreadState.AWAITING_APPROVAL and await w.counter("x") == 0
    assert "echo: and meanwhile" in w.texts(t)  # the held message is answered


class AsksEveryTime(Counter):
    name = "asks_every_time"
    allow_always = False


async def test_a_tool_that_asks_every_time_never_offers_or_records_always(world: Any) -> None:
    t = ThreadKey("telegram", "bot1", "no-always")
    w = world(model({"count it": [("asks_every_time", {"label": "x"})]}))
    add_tool(w, AsksEveryTime())
    await w.start()
    await w.send(user_event(t, "count it"))
    await w.settle(t)
    prompt = w.prompts(t)[0].message
    assert [b.label for b in prompt.buttons] == ["Approve", "Deny"]
    assert "Always" not in prompt.text and "asks every time" in prompt.text
    await w.send(user_event(t, "always"))  # typed anyway: approved once
    await w.settle(t)
    edit = [x for x in w.outbox.log if x.op == "edit"][-1]
    assert "✅ Approved" in edit.message.text and "always" not in edit.message.text
    assert await w.counter("x") == 1
    assert not (await w.session(t)).always_approved
    await w.send(user_event(t, "count it"))
    await w.settle(t)
    assert len(w.prompts(t)) == 2  # asked again


async def test_someone_else_is_not_told_to_decide_a_pending_approval(world: Any) -> None:
    g = ThreadKey("telegram", "bot1", "-501")
    w = world(model({"count it": [("counter", {"label": "x"})]}), group_reply="all")
    await w.start()
    await w.send(group_event(g, "count it", "alice"))
    await w.settle(g)
    await w.send(group_event(g, "what time is it", "bob"))
    await w.settle(g)
    notice = w.texts(g)[-1]
    assert "waiting for ALICE's decision" in notice and "your decision" not in notice


# --- a routine's job is no one's request: no one's "Always" covers it ---------------
RG = ThreadKey("telegram", "bot1", "-501")  # a group


def routine_job(text: str, user: str = "900", n: int = 1) -> InboundEvent:
    """A full routine's job, written as ``user`` (its creator), as
    agent_core/proactive/runner.py submits it (event id ``routine:…``)."""
    return InboundEvent(
        event_id=f"routine:watch:f{n}:1.0",
        kind=EventKind.MESSAGE,
        channel="telegram",
        thread=RG,
        user_id=user,
        user_name="routine watch",
        text=f"[routine watch] Summarise it.\n\nThe message that triggered this:\n> {text}",
        is_direct=False,
        mentions_bot=True,
        received_at=time.time(),
    )


async def _always_for_900(world: Any, table: dict[str, list[tuple[str, dict[str, Any]]]]) -> Any:
    """Admin 900 asks for the counter in group RG and presses Always."""
    w = world(model(table), admin_ids="telegram:900")
    await w.start()
    await w.send(replace(group_event(RG, "count it", "900"), mentions_bot=True))
    await w.settle(RG)
    await w.send(press(RG, f"ap:{approval_id(w, RG)}:w", user="900"))
    await w.settle(RG)
    assert await w.counter("x") == 1
    assert (await w.session(RG)).always_tools("telegram:900") == {"counter"}
    return w


async def test_a_routine_job_written_as_its_creator_is_not_covered_by_their_always(
    world: Any,
) -> None:
    """An event routine's job quotes someone else's message and is written as its
    creator: their "Always" (for their own requests) does not let its call run
    unasked; a prompt is shown, for the creator to decide."""
    w = await _always_for_900(world, {"count it": [("counter", {"label": "x"})]})
    await w.send(routine_job("count it"))
    await w.settle(RG)
    assert len(w.prompts(RG)) == 2 and await w.counter("x") == 1
    await w.send(press(RG, f"ap:{approval_id(w, RG)}:a", user="900"))  # theirs to decide
    await w.settle(RG)
    assert await w.counter("x") == 2
    # their own requests are still covered
    await w.send(replace(group_event(RG, "count it", "900"), mentions_bot=True))
    await w.settle(RG)
    assert len(w.prompts(RG)) == 2 and await w.counter("x") == 3


async def test_a_routine_jobs_further_calls_ask_after_a_decision(world: Any) -> None:
    """The decision on a routine job's first call goes on with that job: the next
    call of the same response is asked about too, not run on the creator's Always."""
    w = await _always_for_900(
        world,
        {
            "count it": [("counter", {"label": "x"})],
            "count both": [("counter", {"label": "y"}), ("counter", {"label": "z"})],
        },
    )
    await w.send(routine_job("count both"))
    await w.settle(RG)
    assert len(w.prompts(RG)) == 2
    await w.send(press(RG, f"ap:{approval_id(w, RG)}:a", user="900"))
    await w.settle(RG)
    assert await w.counter("y") == 1
    assert len(w.prompts(RG)) == 3 and await w.counter("z") == 0
    await w.send(press(RG, f"ap:{approval_id(w, RG)}:d", user="900"))
    await w.settle(RG)
    assert await w.counter("z") == 0
    assert (await w.session(RG)).state == ThreadState.IDLE


async def test_routine_prompt_always_is_not_a_grant_for_the_creators_own_requests(
    world: Any,
) -> None:
    w = world(model({"count it": [("counter", {"label": "x"})]}), admin_ids="telegram:900")
    await w.start()
    await w.send(routine_job("count it", n=1))
    await w.settle(RG)
    payloads = [b.payload for b in w.prompts(RG)[-1].message.buttons]
    await w.send(press(RG, f"ap:{approval_id(w, RG)}:w", user="900"))  # "Always"
    await w.settle(RG)
    granted = (await w.session(RG)).always_tools("telegram:900")
    # the routine's prompt offers no Always, and a forged "Always" press grants the
    # creator nothing (their own requests would have run unasked since)
    assert not any(p.endswith(":w") for p in payloads), payloads
    assert granted == set(), granted
