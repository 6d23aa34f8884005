"""In a group, a message from another person that arrives during a turn gets a turn
of its own: the notes tools never act for the wrong person."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, user_event


async def test_another_persons_message_mid_turn_gets_a_turn_and_notes_of_its_own(
    world: Any,
) -> None:
    """notes.py: "Notes belong to the person".  Every tool call of a turn acts for the
    turn's sender; Bob's message, arriving while Alice's turn runs, was injected into
    her turn, and his "what do you remember about me?" showed her private notes."""
    from agent_core.llm.base import ChatMessage, CompletionRequest, ToolCall

    def rule(req: CompletionRequest) -> Completion:
        msgs: list[ChatMessage] = list(req.messages)
        users = [m.content for m in msgs if m.role == "user"]
        tools = [m.content for m in msgs if m.role == "tool"]
        if msgs[-1].role == "user" and "weather" in msgs[-1].content:
            return Completion("", tool_calls=(ToolCall("c1", "sleepy", {"ms": 1500}),))
        if any("remember about me" in u for u in users) and len(tools) == 1:
            return Completion("", tool_calls=(ToolCall("c2", "recall", {}),))
        return Completion("answer: " + (tools[-1] if tools else "-"))

    w = world(FnModel(rule), group_reply="all")
    await w.redis.hset(keys.user_notes("telegram:alice"), "a1", "Alice's bank PIN is 4321")
    await w.start()
    group = ThreadKey("telegram", "bot1", "-500")
    await w.send(user_event(group, "how is the weather?", user="alice", is_direct=False))
    await asyncio.sleep(0.5)  # Alice's turn is in its tool call
    await w.send(user_event(group, "what do you remember about me?", user="bob", is_direct=False))
    await w.settle(group, timeout=15)
    said = "\n".join(w.texts(group))
    assert w.turns == 2  # Bob's message got a turn of its own
    assert "4321" not in said, f"Bob was shown Alice's notes:\n{said}"
    assert w.texts(group)[-1] == "answer: no notes"  # his recall read his own notes
    assert await w.redis.hgetall(keys.user_notes("telegram:bob")) == {}


async def test_another_persons_message_held_during_an_approval_gets_its_own_turn(
    world: Any,
) -> None:
    from agent_core.events import EventKind
    from agent_core.llm.base import ChatMessage, CompletionRequest, ToolCall

    def rule(req: CompletionRequest) -> Completion:
        msgs: list[ChatMessage] = list(req.messages)
        tools = [m for m in msgs if m.role == "tool"]
        last = msgs[-1]
        if last.role == "user" and "count it" in last.content:
            return Completion("", tool_calls=(ToolCall("c1", "counter", {"label": "x"}),))
        if last.role == "user" and "remember about me" in last.content:
            return Completion("", tool_calls=(ToolCall("c2", "recall", {}),))
        return Completion("answer: " + (tools[-1].content if tools else "-"))

    w = world(FnModel(rule), group_reply="all")
    await w.redis.hset(keys.user_notes("telegram:alice"), "a1", "Alice's bank PIN is 4321")
    await w.start()
    group = ThreadKey("telegram", "bot1", "-500")
    await w.send(user_event(group, "count it", user="alice", is_direct=False))
    await w.settle(group)
    aid = w.prompts(group)[0].message.buttons[0].payload.split(":")[1]
    # Bob writes while Alice's approval waits: his message is held
    await w.send(user_event(group, "what do you remember about me?", user="bob", is_direct=False))
    await w.settle(group)
    await w.send(
        user_event(group, "", "alice", kind=EventKind.ACTION, token=f"ap:{aid}:a", is_direct=False)
    )
    await w.settle(group, timeout=15)
    said = w.texts(group)
    assert "4321" not in "\n".join(said), f"Bob was shown Alice's notes:\n{said}"
    assert said[-1] == "answer: no notes"  # his own turn, his own (empty) notes
    assert await w.counter() == 1
    # and Alice's turn was not lost on the way (the hand-off once failed it)
    assert "answer: counted x -> 1" in said
