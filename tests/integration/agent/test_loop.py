"""The loop through real workers: tools, parallel order, nudges, limits, injection, loops."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, ToolCall
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("web", "local", "loop")


async def test_parallel_tool_calls_keep_their_order(world: Any) -> None:
    calls = [
        call("sleepy", ms=300, label="A"),
        call("sleepy", ms=10, label="B"),
        call("sleepy", ms=150, label="C"),
    ]
    w = world(FnModel(tools_then_answer(("go", calls))))
    await w.start()
    sleepy: Any = type(w.workers[0][0].agent.tools.get("sleepy"))  # conftest's own class
    sleepy.max_active = 0
    started = asyncio.get_running_loop().time()
    await w.send(user_event(T, "go"))
    await w.settle(T)
    assert asyncio.get_running_loop().time() - started < 1.0
    assert sleepy.max_active == 3  # they overlapped
    tools = [m.content for m in w.model.requests[-1].messages if m.role == "tool"]
    assert tools == ["A", "B", "C"]
    assert w.texts(T)[-1] == "done: A | B | C"


async def test_tool_intent_nudge_at_most_two_in_a_row(world: Any) -> None:
    def rule(req: CompletionRequest) -> Completion:
        return Completion("I'll use the current_time tool now.")

    w = world(FnModel(rule))
    await w.start()
    await w.send(user_event(T, "what time"))
    await w.settle(T)
    assert len(w.model.requests) == 3  # the answer, two nudges, then accepted as final
    assert w.texts(T)[-1] == "I'll use the current_time tool now."


async def test_max_iterations_stops_with_a_notice(world: Any) -> None:
    n = {"i": 0}

    def rule(req: CompletionRequest) -> Completion:
        n["i"] += 1
        return Completion(
            "", tool_calls=(ToolCall(f"c{n['i']}", "sleepy", {"label": str(n["i"])}),)
        )

    w = world(FnModel(rule), max_tool_iterations=4)
    await w.start()
    await w.send(user_event(T, "loop forever"))
    await w.settle(T)
    assert len(w.model.requests) == 4
    assert "too many steps" in w.texts(T)[-1]
    s = await w.session(T)
    assert s.history[-1].role == "tool"  # every call has its result


async def test_a_message_arriving_mid_turn_is_injected_in_order(world: Any) -> None:
    w = world(FnModel(tools_then_answer(("slow", [call("sleepy", ms=600, label="zzz")]))))
    await w.start()
    await w.send(user_event(T, "slow"))
    await asyncio.sleep(0.25)
    await w.send(user_event(T, "also this"))
    await w.send(user_event(T, "and this"))
    await w.settle(T)
    second = w.model.requests[1]
    users = [m.content for m in second.messages if m.role == "user"]
    assert users == ["slow", "also this", "and this"]
    assert len(w.model.requests) == 2  # no competing turn
    assert w.turns == 1


async def test_loop_detection_warns_then_stops(world: Any) -> None:
    n = {"i": 0}

    def rule(req: CompletionRequest) -> Completion:
        n["i"] += 1
        return Completion("", tool_calls=(ToolCall(f"c{n['i']}", "sleepy", {"label": "same"}),))

    w = world(FnModel(rule), max_tool_iterations=100)
    await w.start()
    await w.send(user_event(T, "poll"))
    await w.settle(T)
    assert len(w.model.requests) == 20  # critical at the 20th identical call
    tool_msgs = [m for m in w.model.requests[-1].messages if m.role == "tool"]
    warned = [i for i, m in enumerate(tool_msgs) if "[parley:" in m.content]
    assert warned == [9]  # one note, at the 10th call
    assert "going in circles" in w.texts(T)[-1]


async def test_unknown_tool_and_bad_arguments_are_told_to_the_model(world: Any) -> None:
    calls = [call("nope"), call("sleepy", ms="not a number")]
    w = world(FnModel(tools_then_answer(("go", calls))))
    await w.start()
    await w.send(user_event(T, "go"))
    await w.settle(T)
    tools = [m.content for m in w.model.requests[-1].messages if m.role == "tool"]
    assert "no tool named 'nope'" in tools[0]
    assert tools[1].startswith("error: invalid arguments: ms")
