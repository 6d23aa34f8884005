"""Commands, undo / redo, /interrupt — as a user in a chat sees them."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.events import ThreadKey
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("web", "local", "cmd")


def echo() -> FnModel:
    return FnModel(
        tools_then_answer(
            ("count it", [call("counter", label="x")]),
            ("slow", [call("sleepy", ms=5000, label="z")]),
        )
    )


async def say(w: Any, text: str) -> str:
    await w.send(user_event(T, text))
    await w.settle(T)
    return str(w.texts(T)[-1])


async def test_every_command_answers_without_the_llm(world: Any) -> None:
    w = world(echo())
    await w.start()
    for name in (
        "help",
        "status",
        "cost",
        "context",
        "model",
        "agent",
        "tools",
        "ping",
        "version",
        "undo",
        "redo",
        "compact",
        "interrupt",
    ):
        out = await say(w, f"/{name}")
        assert out, name
    assert w.model.requests == []
    assert "unknown command /frobnicate" in (await say(w, "/frobnicate")).lower()
    assert "/help" in await say(w, "/frobnicate")
    assert await say(w, "/ping") == "pong"
    assert "counter" in await say(w, "/tools") and "asks first" in await say(w, "/tools")


async def test_undo_and_redo_move_one_checkpoint(world: Any) -> None:
    w = world(echo())
    await w.start()
    for t in ("one", "two", "three"):
        await say(w, t)
    s = await w.session(T)
    assert [m.content for m in s.history if m.role == "user"] == ["one", "two", "three"]
    await say(w, "/undo")
    assert [m.content for m in (await w.session(T)).history if m.role == "user"] == ["one", "two"]
    await say(w, "/undo")
    assert [m.content for m in (await w.session(T)).history if m.role == "user"] == ["one"]
    await say(w, "/redo")
    assert [m.content for m in (await w.session(T)).history if m.role == "user"] == ["one", "two"]
    # a new turn clears redo
    await say(w, "four")
    assert "Nothing to redo" in await say(w, "/redo")
    users = [m.content for m in (await w.session(T)).history if m.role == "user"]
    assert users == ["one", "two", "four"]


async def test_undo_keeps_at_most_max_checkpoints(world: Any) -> None:
    w = world(echo(), max_undo_checkpoints=3)
    await w.start()
    for i in range(6):
        await say(w, f"m{i}")
    undone = 0
    while "Nothing to undo" not in await say(w, "/undo"):
        undone += 1
    assert undone == 3


async def test_new_and_clear_forget_and_cancel_a_pending_approval(world: Any) -> None:
    w = world(echo())
    await w.start()
    await say(w, "count it")
    aid = w.prompts(T)[0].message.buttons[0].payload.split(":")[1]
    out = await say(w, "/new")
    assert "new conversation" in out and "cancelled" in out
    assert (await w.session(T)).history == []
    # a late press on the old prompt does nothing
    from agent_core.events import EventKind

    await w.send(user_event(T, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 0
    assert "Already decided" in w.private_notes()[-1]


async def test_undo_during_an_approval_says_how_many_held_messages_were_dropped(
    world: Any,
) -> None:
    """/undo cancels the pending approval and steps back; the messages held for it
    go with it (as with /new and /clear), and the reply says so."""
    w = world(echo())
    await w.start()
    await say(w, "hi")
    await say(w, "count it")
    await say(w, "and also this")  # held: "I'll answer this message right after"
    out = await say(w, "/undo")
    assert "Undone" in out and "cancelled" in out, out
    assert "1 message(s) waiting for it were dropped" in out, out
    s = await w.session(T)
    assert not s.held and s.state.value == "idle"
    assert [m.content for m in s.history if m.role == "user"] == ["hi"]
    assert await w.counter() == 0


async def test_model_switch_is_per_session(world: Any) -> None:
    w = world(echo())

    async def listed() -> list[str]:
        return ["fn-model", "other-model"]

    w.model.list_models = listed  # a provider with two models
    await w.start()
    assert "Switched" in await say(w, "/model other-model")
    await say(w, "hi")
    assert w.model.requests[-1].model == "other-model"
    await say(w, "/model default")
    await say(w, "hi")
    assert w.model.requests[-1].model is None


async def test_interrupt_stops_the_running_turn(world: Any) -> None:
    from agent_core.agent.interrupt import interrupt_filter

    w = world(echo())
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(T, "slow"))
    await asyncio.sleep(0.4)
    started = asyncio.get_running_loop().time()
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T)
    assert asyncio.get_running_loop().time() - started < 3  # not the 5 s tool
    assert any("Stopped" in t for t in w.texts(T))
    s = await w.session(T)
    assert s.state.value == "idle"
    calls = [c.id for m in s.history for c in m.tool_calls]
    answered = [m.tool_call_id for m in s.history if m.role == "tool"]
    assert calls and sorted(calls) == sorted(answered)  # the history stays valid
    # the next message is answered normally
    assert await say(w, "hello") == "echo: hello"


async def test_agent_switch_waits_for_a_pending_approval(world: Any, tmp_path: Any) -> None:
    """/agent NAME while a call waits for approval is refused: the approved call would
    otherwise run under the other profile (its tools, its prompt)."""
    (tmp_path / "reader.md").write_text("---\ntools: current_time\n---\nYou only read.")
    w = world(echo(), profiles_dir=str(tmp_path))
    await w.start()
    await say(w, "count it")
    assert w.prompts(T)
    out = await say(w, "/agent reader")
    assert "Decide the pending approval first" in out, out
    assert (await w.session(T)).profile == ""
    aid = w.prompts(T)[0].message.buttons[0].payload.split(":")[1]
    from agent_core.events import EventKind

    await w.send(user_event(T, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 1
    assert "Now talking as `reader`" in await say(w, "/agent reader")
