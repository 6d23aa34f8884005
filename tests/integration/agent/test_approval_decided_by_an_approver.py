"""An approver decides Alice's call in a group: the decision turn goes on as Alice's
turn (docs/agent.md: a decision turn runs the requester's turn) — her /interrupt
stops the approved tool, a further prompt names her, and a late press answers her
held message once, as her turn."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.agent.interrupt import interrupt_filter
from agent_core.events import EventKind, ThreadKey
from agent_core.llm.base import Completion, TokenUsage, ToolCall
from tests.integration.agent.approval_helpers import add_slow_tool, approval_id, counted
from tests.integration.agent.conftest import (
    FnModel,
    World,
    call,
    last,
    tools_then_answer,
    user_event,
)

G = ThreadKey("telegram", "bot1", "-100777")


def press(token: str, user: str) -> Any:
    return user_event(G, "", user, kind=EventKind.ACTION, token=token, is_direct=False)


def said(text: str, user: str) -> Any:
    return user_event(G, text, user, is_direct=False)


async def test_the_requesters_interrupt_stops_a_call_an_approver_approved(world: Any) -> None:
    w: World = world(
        FnModel(tools_then_answer(("ALICE: go", [call("slowask", label="a", ms=3000)]))),
        approver_ids="telegram:boss",
        group_reply="all",
    )
    add_slow_tool(w)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(said("go", "alice"))
    await w.settle(G)
    await w.send(press(f"ap:{approval_id(w, G)}:a", "boss"))
    for _ in range(200):
        if await counted(w, "test:started:a"):
            break
        await asyncio.sleep(0.02)
    await w.send(said("/interrupt", "alice"))
    await w.settle(G)
    texts = w.texts(G)
    assert await counted(w, "test:slow:a") == 0, f"Alice's /interrupt did not stop it: {texts}"
    assert any("Stopped" in t for t in texts), texts
    assert not any("Nothing is running" in t for t in texts), texts


def two_rounds(req: Any) -> Completion:
    tools = [m for m in req.messages if m.role == "tool"]
    m = last(req)
    if m.role == "user" and m.content.endswith("go"):
        return Completion("", tool_calls=(ToolCall("c1", "counter", {"label": "one"}),))
    if m.role == "tool" and len(tools) == 1:
        return Completion("", tool_calls=(ToolCall("c2", "counter", {"label": "two"}),))
    return Completion("done", usage=TokenUsage(1, 1))


async def test_a_further_prompt_after_an_approvers_press_names_the_requester(world: Any) -> None:
    w = world(FnModel(two_rounds), approver_ids="telegram:boss", group_reply="all")
    await w.start()
    await w.send(said("go", "alice"))
    await w.settle(G)
    assert "for ALICE" in w.prompts(G)[-1].message.text
    await w.send(press(f"ap:{approval_id(w, G)}:a", "boss"))
    await w.settle(G)
    assert len(w.prompts(G)) == 2, w.texts(G)
    second = w.prompts(G)[-1].message.text
    assert "for ALICE" in second and "BOSS" not in second, second.splitlines()[-1]
    # a bystander pressing is told whose decision it is
    await w.send(press(f"ap:{approval_id(w, G)}:a", "bob"))
    await w.settle(G)
    refusal = w.private_notes()[-1]
    assert "Only ALICE or an approver" in refusal, refusal


async def _asked_with_the_scheduler_off(world: Any) -> tuple[Any, str]:
    """Alice asks for a counted call in group G (approver: boss, no expiry timer);
    the world and the pending approval's id."""
    w = world(
        FnModel(tools_then_answer(("ALICE: count it", [call("counter", label="x")]))),
        approver_ids="telegram:boss",
        group_reply="all",
        scheduler_enabled=False,
        approval_ttl_secs=60,
    )
    await w.start()
    await w.send(said("count it", "alice"))
    await w.settle(G)
    return w, approval_id(w, G)


async def test_an_approvers_late_press_answers_the_requesters_held_message_once(
    world: Any,
) -> None:
    """Scheduler off: the approval expires with nobody deciding and Alice wrote
    meanwhile.  The approver's late press ends the wait ("expired, so nothing was
    run"): one model call, answering Alice's message as her turn (as the timer's
    expiry does), not one for the press and another for her message."""
    w, aid = await _asked_with_the_scheduler_off(world)
    await w.send(said("and what time is it?", "alice"))
    await w.settle(G)
    assert len((await w.session(G)).held) == 1
    before = len(w.model.requests)
    w.clock.offset = 120  # expired
    await w.send(press(f"ap:{aid}:a", "boss"))
    await w.settle(G)
    assert await w.counter() == 0
    assert any("expired" in n for n in w.private_notes()), w.private_notes()
    calls = w.model.requests[before:]
    lasts = [[m.content for m in r.messages if m.role == "user"][-1:] for r in calls]
    assert len(calls) == 1, f"{len(calls)} model calls for one held message: {lasts}"
    assert lasts == [["ALICE: and what time is it?"]], lasts
    assert not (await w.session(G)).held


async def test_a_late_press_with_nothing_of_the_requesters_held_makes_no_model_call_for_it(
    world: Any,
) -> None:
    """Only Bob wrote meanwhile: his message gets its turn (one model call); the
    approver's press itself is answered by no model call (nothing of Alice's)."""
    w, aid = await _asked_with_the_scheduler_off(world)
    await w.send(said("hi all", "bob"))
    await w.settle(G)
    before = len(w.model.requests)
    w.clock.offset = 120  # expired
    await w.send(press(f"ap:{aid}:a", "boss"))
    await w.settle(G)
    assert await w.counter() == 0
    calls = w.model.requests[before:]
    lasts = [[m.content for m in r.messages if m.role == "user"][-1:] for r in calls]
    assert lasts == [["BOB: hi all"]], lasts
    s = await w.session(G)
    assert not s.pending_approval and not s.held
