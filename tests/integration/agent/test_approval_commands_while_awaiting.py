"""Commands typed while an approval is pending (docs/agent.md: /interrupt (or /stop);
/deny [id] [reason])."""

from __future__ import annotations

from typing import Any

from agent_core.agent.session import ThreadState
from agent_core.events import ThreadKey
from tests.integration.agent.approval_helpers import approval_id
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("telegram", "bot1", "cmds")


async def asked(world: Any) -> tuple[Any, str]:
    w = world(FnModel(tools_then_answer(("count it", [call("counter", label="x")]))))
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    return w, approval_id(w, T)


async def test_slash_stop_cancels_the_pending_approval_like_interrupt(world: Any) -> None:
    w, _aid = await asked(world)
    await w.send(user_event(T, "/stop"))
    await w.settle(T)
    last = w.texts(T)[-1]
    assert "Unknown command" not in last, f"/stop answered: {last!r}"
    s = await w.session(T)
    assert s.state == ThreadState.IDLE and not s.pending_approval


async def test_slash_deny_with_a_one_word_reason(world: Any) -> None:
    """`/deny expensive` is a reason, not an approval id."""
    w, _aid = await asked(world)
    await w.send(user_event(T, "/deny expensive"))
    await w.settle(T)
    s = await w.session(T)
    assert s.state == ThreadState.IDLE, f"not denied; the user was told: {w.texts(T)[-1]!r}"
    tool_msg = [m for m in w.model.requests[-1].messages if m.role == "tool"][-1]
    assert "denied" in tool_msg.content and "expensive" in tool_msg.content
