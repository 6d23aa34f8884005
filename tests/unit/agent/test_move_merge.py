"""Merging a moved conversation into a thread that already holds one (no Redis)."""

from __future__ import annotations

from agent_core.agent.move import merge
from agent_core.agent.session import Session, ThreadState
from agent_core.llm.base import ChatMessage, TokenUsage, ToolCall

NEW = "telegram:bot:-1001234567890:"


def awaiting(thread: str) -> Session:
    call = ToolCall("c1", "counter", {})
    return Session(
        thread=thread,
        history=[ChatMessage("user", "count it"), ChatMessage("assistant", "", tool_calls=(call,))],
        state=ThreadState.AWAITING_APPROVAL,
        pending_approval="ap1",
        resume={"calls": [call.to_dict()], "queue": ["c1"]},
        model="big",
        always_approved={"shell"},
        usage=TokenUsage(10, 5, total=15),
        cost_usd=0.5,
        turns=3,
        created_at=100.0,
        updated_at=200.0,
    )


def test_nothing_there_moves_as_it_is() -> None:
    old = awaiting("telegram:bot:-42:")
    moved, carried = merge(old, None, NEW)
    assert moved is not None and moved.thread == NEW and carried == "ap1"
    assert moved.history == old.history and moved.resume == old.resume
    assert merge(None, None, NEW) == (None, "")


def test_pending_approval_goes_along_while_the_new_one_has_no_history() -> None:
    new = Session(thread=NEW, profile="ops", created_at=300.0, updated_at=300.0)
    m, carried = merge(awaiting("telegram:bot:-42:"), new, NEW)
    assert m is not None and carried == "ap1"
    assert m.state == ThreadState.AWAITING_APPROVAL and m.pending_approval == "ap1"
    assert (m.model, m.profile) == ("big", "ops")  # the newer one's where it has them


def test_older_history_first_settings_of_the_newer_sums_added() -> None:
    new = Session(
        thread=NEW,
        history=[ChatMessage("user", "hello"), ChatMessage("assistant", "hi")],
        model="small",
        always_approved={"http_request"},
        usage=TokenUsage(1, 1, total=2),
        cost_usd=0.25,
        turns=1,
        created_at=300.0,
        updated_at=400.0,
    )
    m, carried = merge(awaiting("telegram:bot:-42:"), new, NEW)
    assert m is not None and carried == ""
    assert [x.content for x in m.history if x.role == "user"] == ["count it", "hello"]
    # the call that waited for approval gets a "not run" result right after it
    assert m.history[1].tool_calls and m.history[2].role == "tool"
    assert "not run" in m.history[2].content
    assert m.state == ThreadState.IDLE and not m.pending_approval and not m.resume
    assert m.model == "small" and m.always_approved == {"shell", "http_request"}
    assert (m.turns, m.cost_usd, m.usage.total) == (4, 0.75, 17)
    assert (m.created_at, m.updated_at, m.thread) == (100.0, 400.0, NEW)
