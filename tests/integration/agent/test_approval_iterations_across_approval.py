"""MAX_TOOL_ITERATIONS across an approval: "the iterations it already used count
against max_iterations" (agent_core/agent/loop.py, run_loop docstring)."""

from __future__ import annotations

from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, ToolCall
from tests.integration.agent.approval_helpers import approval_id, press
from tests.integration.agent.conftest import FnModel, user_event

T = ThreadKey("telegram", "bot1", "iters")


def never_done() -> FnModel:
    n = {"i": 0}

    def rule(req: CompletionRequest) -> Completion:
        n["i"] += 1
        m = req.messages[-1]
        if m.role == "user" and m.content == "count it":
            return Completion("", tool_calls=(ToolCall(f"c{n['i']}", "counter", {}),))
        # keeps calling a free tool, never answers
        return Completion(
            "", tool_calls=(ToolCall(f"s{n['i']}", "sleepy", {"label": str(n["i"])}),)
        )

    return FnModel(rule)


async def test_the_iteration_that_asked_counts_against_the_limit(world: Any) -> None:
    w = world(never_done(), max_tool_iterations=2)
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    assert len(w.model.requests) == 1  # iteration 1 asked
    await w.send(press(T, f"ap:{approval_id(w, T)}:a"))
    await w.settle(T)
    assert any("too many steps" in t for t in w.texts(T))
    # iteration 1 (asked) + iteration 2 (resumed) = 2 model calls in all
    assert len(w.model.requests) == 2, (
        f"{len(w.model.requests)} model calls with MAX_TOOL_ITERATIONS=2"
    )
