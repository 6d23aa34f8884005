"""A history (and so a request) starts with the user: Session.trim cuts where a turn
starts, and context.request_messages folds Parley's leading words into the first
user message (Anthropic refuses a first message from the assistant)."""

from __future__ import annotations

from agent_core.agent.context import CUT_NOTE, request_messages
from agent_core.agent.session import Session
from agent_core.llm.base import ChatMessage, ToolCall


def _turn(text: str) -> list[ChatMessage]:
    call = ToolCall(f"c-{text}", "sleepy", {})
    return [
        ChatMessage("user", text),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", "ok", tool_call_id=call.id, name="sleepy"),
        ChatMessage("assistant", f"answer to {text}"),
    ]


def test_trim_cuts_at_the_next_user_message() -> None:
    s = Session("t", history=[*_turn("a"), *_turn("b")])
    dropped = s.trim(6)  # a cut at index 2 would leave [tool?, assistant, ...]
    assert [m.content for m in dropped][:1] == ["a"]
    assert s.history[0].role == "user" and s.history[0].content == "b"


def test_trim_keeps_a_turn_longer_than_the_limit_whole() -> None:
    s = Session("t", history=_turn("a"))
    assert s.trim(2) == []  # the only turn: kept whole (up to twice the limit)
    assert s.history[0].role == "user"


def test_trim_bounds_a_long_run_of_notes() -> None:
    notes = [ChatMessage("assistant", f"note {i}") for i in range(20)]
    s = Session("t", history=[ChatMessage("user", "hi"), *notes])
    s.trim(4)
    assert len(s.history) == 4  # notes alone cannot grow the history for good


def test_a_leading_note_is_folded_into_the_first_user_message() -> None:
    msgs = request_messages(
        [ChatMessage("assistant", "Your 9:00 briefing"), ChatMessage("user", "thanks")]
    )
    assert [m.role for m in msgs] == ["user"]
    assert msgs[0].content == "(earlier, you wrote: Your 9:00 briefing)\n\nthanks"


def test_leading_tool_calls_and_results_are_left_out_of_the_request() -> None:
    history = [*_turn("a")[1:], ChatMessage("user", "b")]
    msgs = request_messages(history)
    assert [m.role for m in msgs] == ["user"]
    assert msgs[0].content.startswith("(earlier, you wrote: answer to a)")
    assert request_messages(_turn("a")) == _turn("a")  # a history that starts well


def test_a_history_without_any_user_message_keeps_its_calls_and_results() -> None:
    """One turn longer than twice the limit, cut in its middle: what is left is sent
    after a note in the user's place, tool calls and results kept (they were all
    dropped, and the request was empty)."""
    h = []
    for i in range(3):
        h.append(ChatMessage("assistant", "", tool_calls=(ToolCall(f"c{i}", "t", {}),)))
        h.append(ChatMessage("tool", f"result {i}", tool_call_id=f"c{i}", name="t"))
    got = request_messages([ChatMessage("tool", "orphan", tool_call_id="x", name="t"), *h])
    assert got[0].role == "user" and got[0].content == CUT_NOTE
    assert got[1:] == h
