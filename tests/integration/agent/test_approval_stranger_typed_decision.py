"""docs/agent.md: "Only the person who asked, or someone in APPROVER_IDS, may decide.
Anyone else gets a short private notice and nothing changes." — typed words too."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core.agent.session import ThreadState
from agent_core.events import ThreadKey
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("slack", "T1", "C1", "1700000000.000100")  # a channel thread


async def test_a_strangers_typed_yes_gets_a_private_notice(world: Any) -> None:
    w = world(FnModel(tools_then_answer(("ALICE: count it", [call("counter", label="x")]))))
    await w.start()
    await w.send(user_event(T, "count it", "alice", is_direct=False))
    await w.settle(T)
    assert (await w.session(T)).state == ThreadState.AWAITING_APPROVAL, w.texts(T)
    await w.send(user_event(T, "yes", "mallory", is_direct=False))
    await w.settle(T)
    assert await w.counter() == 0
    assert (await w.session(T)).state == ThreadState.AWAITING_APPROVAL
    notices = [
        s.message
        for s in w.outbox.log
        if s.op == "send" and "can decide" in s.message.text and s.thread == str(T)
    ]
    assert notices, "no notice at all"
    assert all(n.private_to == "mallory" for n in notices), (
        f"shown to the whole channel: {[(n.text, n.private_to) for n in notices]}"
    )


@pytest.mark.parametrize("command", ["/new", "/clear", "/undo", "/interrupt"])
async def test_only_who_may_decide_can_cancel_a_pending_approval(world: Any, command: str) -> None:
    """Cancelling is deciding: a bystander's /new, /clear, /undo or /interrupt is
    refused and the approval stays; the requester's cancels it."""
    w = world(FnModel(tools_then_answer(("ALICE: count it", [call("counter", label="x")]))))
    await w.start()
    await w.send(user_event(T, "count it", "alice", is_direct=False))
    await w.settle(T)
    aid = (await w.session(T)).pending_approval
    assert aid
    await w.send(user_event(T, command, "mallory", is_direct=False))
    await w.settle(T)
    s = await w.session(T)
    assert s.state == ThreadState.AWAITING_APPROVAL and s.pending_approval == aid
    assert any("only" in t and "can cancel" in t for t in w.texts(T)), w.texts(T)
    await w.send(user_event(T, command, "alice", is_direct=False))
    await w.settle(T)
    s = await w.session(T)
    assert s.state != ThreadState.AWAITING_APPROVAL and not s.pending_approval
    assert await w.counter() == 0
