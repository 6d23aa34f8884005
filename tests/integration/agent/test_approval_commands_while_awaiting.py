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


def _problems(history: list[Any]) -> list[str]:
    """Every tool call answered right after it, no result without its call."""
    probs = []
    open_calls: set[str] = set()
    for i, m in enumerate(history):
        if m.role == "tool":
            if m.tool_call_id not in open_calls:
                probs.append(f"{i}: orphan tool result {m.tool_call_id}")
            open_calls.discard(m.tool_call_id)
            continue
        if open_calls:
            probs.append(f"{i}: {m.role} before results of {sorted(open_calls)}")
            open_calls = set()
        if m.role == "assistant" and m.tool_calls:
            open_calls = {c.id for c in m.tool_calls}
    return probs


async def test_a_press_on_a_prompt_cancelled_by_new_runs_nothing_and_undo_redo_stay_valid(
    world: Any,
) -> None:
    from tests.integration.agent.approval_helpers import press

    w, aid = await asked(world)
    for text in ("/new", "hello"):
        await w.send(user_event(T, text))
        await w.settle(T)
    await w.send(press(T, f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 0
    assert not _problems((await w.session(T)).history)
    for text in ("/undo", "/undo", "/redo"):
        await w.send(user_event(T, text))
        await w.settle(T)
        assert not _problems((await w.session(T)).history), text


async def test_undo_and_redo_during_an_approval_keep_the_history_valid(world: Any) -> None:
    w, _aid = await asked(world)
    await w.send(user_event(T, "and also this"))  # held
    await w.settle(T)
    for text in ("/undo", "/redo", "next"):
        await w.send(user_event(T, text))
        await w.settle(T)
        assert not _problems((await w.session(T)).history), text
    assert await w.counter() == 0


async def test_an_expired_approval_does_not_stop_others_starting_anew(world: Any) -> None:
    group = ThreadKey("telegram", "bot1", "-777")
    w = world(
        FnModel(tools_then_answer(("ALICE: count it", [call("counter", label="x")]))),
        group_reply="all",
        approval_ttl_secs=60,
    )
    await w.start()
    await w.send(user_event(group, "count it", user="alice", is_direct=False))
    await w.settle(group)
    w.clock.offset = 3600  # an hour later: the approval expired long ago
    await w.send(user_event(group, "/new", user="bob", is_direct=False))
    await w.settle(group)
    assert "Started a new conversation" in w.texts(group)[-1], w.texts(group)


async def test_interrupt_drops_the_held_messages_and_says_how_many(world: Any) -> None:
    """docs/agent.md: the messages held for a cancelled approval are dropped with it,
    and the reply says how many; /interrupt as /undo, /new and /clear."""
    w, _aid = await asked(world)
    await w.send(user_event(T, "held while waiting"))
    await w.settle(T)
    assert len((await w.session(T)).held) == 1
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T)
    s = await w.session(T)
    reply = w.texts(T)[-1]
    assert s.state == ThreadState.IDLE
    assert "cancelled" in reply and "1 message(s) waiting for it were dropped" in reply, reply
    assert not s.held, f"held message left in an idle session: {s.held}"
    # and it does not come back in the next turn as if just sent
    await w.send(user_event(T, "hello"))
    await w.settle(T)
    users = [m.content for m in w.model.requests[-1].messages if m.role == "user"]
    assert not any("held while waiting" in u for u in users), users
