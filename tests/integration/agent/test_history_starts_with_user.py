"""What a turn sends the model starts with the user, whatever the stored history
starts with: trimmed histories cut where a turn starts, and a routine's note after
/new is folded into the first user message (Anthropic: 400 "first message must use
the user role")."""

from __future__ import annotations

import dataclasses
from typing import Any

from agent_core.events import EventKind, ThreadKey
from agent_core.llm.base import Completion, TokenUsage, ToolCall
from tests.integration.agent.approval_helpers import approval_id, press
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("web", "local", "history-start")


def _model() -> FnModel:
    return FnModel(
        tools_then_answer(
            ("tool", [call("sleepy", ms=0, label="z")]),
            ("count it", [call("counter", label="x")]),
        )
    )


def _roles(req: Any) -> list[str]:
    return [m.role for m in req.messages if m.role != "system"]


async def test_trimmed_history_starts_with_a_user_message(world: Any) -> None:
    w = world(_model(), max_history_messages=4)
    await w.start()
    for text in ("tool", "b", "c"):
        await w.send(user_event(T, text))
        await w.settle(T)
    assert (await w.session(T)).history[0].role == "user"
    assert _roles(w.model.requests[-1])[0] == "user", _roles(w.model.requests[-1])


async def test_a_turn_longer_than_the_limit_is_kept_from_its_user_message(world: Any) -> None:
    w = world(_model(), max_history_messages=2)
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    await w.send(press(T, f"ap:{approval_id(w, T)}:a"))
    await w.settle(T)
    s = await w.session(T)
    assert s.history[0].role == "user", [m.role for m in s.history]


async def test_a_note_after_new_is_folded_into_the_next_request(world: Any) -> None:
    w = world(_model())
    await w.start()
    await w.send(user_event(T, "/new"))
    await w.settle(T)
    note = user_event(T, "Good morning! Your 9:00 briefing: ...")
    await w.send(dataclasses.replace(note, kind=EventKind.NOTE))
    await w.settle(T)
    await w.send(user_event(T, "thanks, what's first?"))
    await w.settle(T)
    req = w.model.requests[-1]
    assert _roles(req) == ["user"], _roles(req)
    first = next(m for m in req.messages if m.role == "user").content
    assert first.startswith("(earlier, you wrote: Good morning!"), first
    assert first.endswith("thanks, what's first?"), first


async def test_notes_are_trimmed_like_turns(world: Any) -> None:
    w = world(_model(), max_history_messages=4)
    await w.start()
    for i in range(8):
        note = user_event(T, f"note {i}")
        await w.send(dataclasses.replace(note, kind=EventKind.NOTE))
        await w.settle(T)
    s = await w.session(T)
    assert len(s.history) == 4, [m.content for m in s.history]


async def test_a_turn_waiting_for_approval_is_not_trimmed_into(world: Any) -> None:
    """A turn longer than the history limit stops for an approval: it is not cut
    while it is still going (the cut dropped its user message, and the request after
    the approval carried neither the question nor the tool results)."""
    asked = ThreadKey("web", "local", "history-start-long-turn")

    def rule(req: Any) -> Any:
        msgs = [m for m in req.messages if m.role != "system"]
        tools = [m for m in msgs if m.role == "tool"]
        if any(m.name == "counter" for m in tools):
            return Completion("final answer", usage=TokenUsage(10, 5))
        if tools:
            return Completion("", tool_calls=(ToolCall("cnt", "counter", {"label": "x"}),))
        return Completion(
            "",
            tool_calls=tuple(
                ToolCall(f"s{i}", "sleepy", {"ms": 0, "label": f"z{i}"}) for i in range(3)
            ),
        )

    w = world(FnModel(rule), max_history_messages=2)
    await w.start()
    await w.send(user_event(asked, "go"))
    await w.settle(asked)
    await w.send(press(asked, f"ap:{approval_id(w, asked)}:a"))
    await w.settle(asked)
    last = w.model.requests[-1]
    assert next(m.role for m in last.messages if m.role != "system") == "user"
    assert any(m.role == "user" and m.content == "go" for m in last.messages)
    assert any(m.role == "tool" and m.name == "counter" for m in last.messages)
    assert w.texts(asked)[-1] == "final answer"
