"""Order per conversation for a message held while an approval waited."""

from __future__ import annotations

from typing import Any

from agent_core.events import EventKind, ThreadKey
from agent_core.llm.base import ChatMessage, Completion, CompletionRequest, ToolCall
from tests.integration.agent.conftest import FnModel, user_event


async def test_a_held_message_is_answered_before_that_persons_later_one(world: Any) -> None:
    """What the user saw: in a group, Bob wrote while Alice's approval waited (his
    message is held in the session), and again right after Alice approved; the bot
    answered his second message first.  The approval's turn queues a held message
    of another person again under its old arrival number, which is below the
    thread's next, so the hand-off appended it behind Bob's later message already
    waiting.  Now it goes back in line right behind the running turn's entries,
    before the later arrivals."""

    def rule(req: CompletionRequest) -> Completion:
        msgs: list[ChatMessage] = list(req.messages)
        last = msgs[-1]
        if last.role == "user" and "count it" in last.content:
            return Completion("", tool_calls=(ToolCall("c1", "counter", {"label": "x"}),))
        if last.role == "tool":
            return Completion("answer: " + last.content)
        return Completion("echo: " + last.content)

    w = world(FnModel(rule), group_reply="all")
    await w.start()
    group = ThreadKey("telegram", "bot1", "-501")
    await w.send(user_event(group, "count it", user="alice", is_direct=False))
    await w.settle(group)
    aid = w.prompts(group)[0].message.buttons[0].payload.split(":")[1]
    # Bob writes while Alice's approval waits: held
    await w.send(user_event(group, "bob one", user="bob", is_direct=False))
    await w.settle(group)
    await w.stop()  # so that both next events are queued together, deterministically
    # Alice approves; right after, Bob writes again
    await w.send(
        user_event(group, "", "alice", kind=EventKind.ACTION, token=f"ap:{aid}:a", is_direct=False)
    )
    await w.send(user_event(group, "bob two", user="bob", is_direct=False))
    await w.start()
    await w.settle(group, timeout=15)
    said = [t for t in w.texts(group) if t.startswith("echo: BOB")]
    assert said == ["echo: BOB: bob one", "echo: BOB: bob two"], w.texts(group)
