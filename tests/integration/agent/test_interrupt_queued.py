"""A /stop (/interrupt) waiting in the thread's queue: it stops only a turn that was
already running when it arrived, and a stop never loses a message taken in."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.agent import signals
from agent_core.agent.interrupt import interrupt_filter
from agent_core.agent.turn import Turn
from agent_core.events import ThreadKey
from agent_core.store import keys
from tests.integration.agent.approval_helpers import approval_id, press
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("web", "local", "queued-stop")


def _said_by_user(s: Any) -> list[str]:
    return [m.content for m in s.history if m.role == "user"]


async def test_stop_for_a_running_turn_does_not_stop_the_next_one(world: Any) -> None:
    """Slow turn running; "M1", "M2", "/stop" sent: the slow turn stops, then M1's
    turn takes M2 in and answers both (the same /stop does not stop it too)."""
    w = world(FnModel(tools_then_answer(("slow", [call("sleepy", ms=3000, label="z")]))))
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(T, "slow"))
    await asyncio.sleep(0.6)  # the slow turn is in its tool call
    await w.send(user_event(T, "M1 what is 2+2"))
    await w.send(user_event(T, "M2 and 3+3"))
    await w.send(user_event(T, "/stop"))
    await w.settle(T, timeout=15)
    said = w.texts(T)
    assert said.count("⏹ Stopped.") == 1, said
    users = _said_by_user(await w.session(T))
    assert any("M1" in u for u in users) and any("M2" in u for u in users), users
    assert said[-1] != "Nothing is running right now.", said  # its stop was reported


async def test_stop_queued_before_the_turn_began_waits_for_its_own_turn(world: Any) -> None:
    """M1, M2 and /stop queued while nothing ran: M1's turn answers M1 and M2; the
    /stop, sent before that turn began, does not stop it (nor lose M2)."""
    w = world(FnModel(tools_then_answer()))
    await w.send(user_event(T, "M1 first"))
    await w.send(user_event(T, "M2 second, remember 42"))
    await w.send(user_event(T, "/stop"))
    await w.start()
    await w.settle(T)
    said = w.texts(T)
    assert "⏹ Stopped." not in said, said
    assert said[-1] == "Nothing is running right now.", said
    users = _said_by_user(await w.session(T))
    assert any("M2" in u for u in users), users


async def test_stop_seen_in_the_queue_leaves_earlier_messages_for_their_own_turn(
    world: Any,
) -> None:
    """Without the ingest filter the running turn sees /stop among what arrived: it
    stops with nothing taken from the queue, and M1 and M2 are answered after."""
    w = world(FnModel(tools_then_answer(("slow", [call("sleepy", ms=1500, label="z")]))))
    await w.start()  # no interrupt_filter: the turn finds the /stop in its mailbox
    await w.send(user_event(T, "slow"))
    await asyncio.sleep(0.5)
    await w.send(user_event(T, "M1 what is 2+2"))
    await w.send(user_event(T, "M2 and 3+3"))
    await w.send(user_event(T, "/stop"))
    await w.settle(T, timeout=15)
    said = w.texts(T)
    assert said.count("⏹ Stopped.") == 1, said
    users = _said_by_user(await w.session(T))
    assert any("M1" in u for u in users) and any("M2" in u for u in users), users
    assert said[-1].startswith("echo:"), said  # answered after the stop, the /stop silent


async def test_held_message_survives_a_stop_queued_behind_the_approve_press(
    world: Any,
) -> None:
    """Approval pending with a held message; Approve pressed with a /stop queued
    behind it: the held message is answered, not lost."""
    w = world(FnModel(tools_then_answer(("count it", [call("counter", label="x")]))))
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    aid = approval_id(w, T)
    await w.send(user_event(T, "also remember the code 7781"))  # held
    await w.settle(T)
    assert (await w.session(T)).held
    await w.stop()
    await w.send(press(T, f"ap:{aid}:a"))
    await w.send(user_event(T, "/stop"))
    await w.start()
    await w.settle(T)
    s = await w.session(T)
    assert any("7781" in m.content for m in s.history if m.role == "user"), s.history
    assert await w.counter() == 1


async def test_a_stop_after_held_messages_were_taken_keeps_them(world: Any) -> None:
    """The approved call runs; a /stop arrives after the decision turn began but
    only the next iteration sees it (the held messages already taken out of the
    session): they stay in the conversation and the stop notice says so."""
    w = world(FnModel(tools_then_answer(("count it", [call("counter", label="x")]))))
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    aid = approval_id(w, T)
    await w.send(user_event(T, "also remember the code 7781"))  # held
    await w.settle(T)
    real = signals.check_signals
    sent = False

    async def stop_first(self: Any) -> Any:
        nonlocal sent
        if not sent and self.pending_inject:
            sent = True  # the /stop arrives now, after the decision turn began
            flag = f"{self.started_ms + 1}|{self.user}"
            await self.agent.redis.set(keys.interrupt(self.thread), flag)
            self._checked_signals = True  # the next check reads the flag
        return await real(self)

    Turn.check_signals = stop_first  # type: ignore[method-assign]
    try:
        await w.send(press(T, f"ap:{aid}:a"))
        await w.settle(T)
    finally:
        Turn.check_signals = real  # type: ignore[method-assign]
    s = await w.session(T)
    assert any("7781" in m.content for m in s.history if m.role == "user"), s.history
    assert "kept in our conversation" in w.texts(T)[-1], w.texts(T)
