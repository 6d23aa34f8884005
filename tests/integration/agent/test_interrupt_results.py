"""/interrupt while a round of tools runs: the model is told what really happened to
each call (docs/agent.md, "How /interrupt works").  A call that finished keeps its
result (its side effect is done: before, it was reported "not run" and the model
would believe the note unsaved and save it again); one still running is
"interrupted (it may have partly run)"; one never started (waiting for its
approval) is "not run"."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.agent.interrupt import interrupt_filter
from agent_core.events import ThreadKey
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("telegram", "bot1", "intr-results")
STOPPED_RUNNING = "error: interrupted by the user (it may have partly run)"
STOPPED_NOT_RUN = "error: not run (the turn was stopped)"


async def test_each_call_of_a_stopped_round_gets_what_happened_to_it(world: Any) -> None:
    w = world(
        FnModel(
            tools_then_answer(
                (
                    "go",
                    [
                        call("remember", note="likes tea"),
                        call("sleepy", ms=30_000, label="z"),
                        call("counter", label="never"),  # needs an approval
                    ],
                )
            )
        )
    )
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(T, "go"))
    notes = keys.user_notes(user_event(T, "go").qualified_user)
    async with asyncio.timeout(10):  # until the note is saved: the first call is done
        while not await w.redis.hlen(notes):
            await asyncio.sleep(0.01)
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T, timeout=15)
    assert "⏹ Stopped." in w.texts(T)
    session = await w.session(T)
    i = max(n for n, m in enumerate(session.history) if m.role == "assistant" and m.tool_calls)
    results = [(m.name, m.content) for m in session.history[i + 1 :] if m.role == "tool"]
    assert [name for name, _ in results] == ["remember", "sleepy", "counter"]
    remembered = results[0][1]
    assert not remembered.startswith("error:"), remembered  # the call's own result
    assert results[1:] == [("sleepy", STOPPED_RUNNING), ("counter", STOPPED_NOT_RUN)]
    assert await w.redis.hlen(notes) == 1  # it did run, once
    assert await w.redis.get("test:counter:never") is None
