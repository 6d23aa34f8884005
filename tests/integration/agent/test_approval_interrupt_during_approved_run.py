"""/interrupt while an approved tool is running (the decision turn).

docs/agent.md: "/interrupt stops the running turn ... cancels what it is doing,
gives any unfinished tool call an 'interrupted' result ... and says '⏹ Stopped.'"
"""

from __future__ import annotations

from typing import Any

from agent_core.agent.interrupt import interrupt_filter
from agent_core.events import ThreadKey
from tests.integration.agent.approval_helpers import add_slow_tool, approval_id, counted, press
from tests.integration.agent.conftest import FnModel, World, call, tools_then_answer, user_event

T = ThreadKey("telegram", "bot1", "intr")


def model() -> FnModel:
    return FnModel(
        tools_then_answer(
            ("go", [call("slowask", label="a", ms=3000)]),
            (
                "go twice",
                [call("slowask", label="a", ms=3000), call("slowask", label="b", ms=1000)],
            ),
        )
    )


async def start(world: Any) -> World:
    w: World = world(model())
    add_slow_tool(w)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    return w


async def wait_started(w: World, label: str) -> None:
    import asyncio

    for _ in range(200):
        if await counted(w, f"test:started:{label}"):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the approved tool never started")


async def test_interrupt_during_an_approved_tool_stops_the_turn(world: Any) -> None:
    w = await start(world)
    await w.send(user_event(T, "go"))
    await w.settle(T)
    aid = approval_id(w, T)
    await w.send(press(T, f"ap:{aid}:a"))
    await wait_started(w, "a")
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T)
    texts = w.texts(T)
    # the user asked to stop: the agent must not carry on calling the model
    assert len(w.model.requests) == 1, f"the model was called again after /interrupt: {texts[-2:]}"
    assert any("Stopped" in t for t in texts), f"no 'Stopped' shown; chat: {texts}"


async def test_interrupt_does_not_run_the_next_always_approved_call(world: Any) -> None:
    w = await start(world)
    await w.send(user_event(T, "go twice"))
    await w.settle(T)
    aid = approval_id(w, T)
    await w.send(press(T, f"ap:{aid}:w"))  # Always: call b (same tool) would run without asking
    await wait_started(w, "a")
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T)
    assert await counted(w, "test:slow:a") == 0  # a was cut short
    # after /interrupt nothing more may run
    assert await counted(w, "test:started:b") == 0, "the second risky call ran after /interrupt"
