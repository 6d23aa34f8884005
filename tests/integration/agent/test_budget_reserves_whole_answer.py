"""The cost guard reserves a whole answer, so the day's budget is overshot by at
most one call.

What the user (the operator) saw: with DAILY_BUDGET_USD nearly spent, several
people's calls in flight together all passed the check and the day ended several
calls over the limit, although docs/agent.md promises "at most one call".  Each
check reserved the prompt and 1,024 output tokens while an answer may be up to
LLM_MAX_TOKENS (4,096) long, and the output is the expensive part: a reservation
was about a third of what the call could cost.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_core.agent.budget import BudgetGuard, reserved_cost
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, ModelInfo, TokenUsage
from tests.integration.agent.conftest import FnModel, user_event

IN, OUT = 3e-6, 15e-6  # $3 / $15 per million tokens (the default price)
ANSWER = 4096  # the backend's LLM_MAX_TOKENS: the longest answer a call may get
PROMPT = 100  # what the provider reports (under Parley's estimate of the prompt)


async def test_calls_in_flight_at_the_limit_overshoot_by_at_most_one_call(world: Any) -> None:
    def rule(req: CompletionRequest) -> Completion:
        return Completion("ok", usage=TokenUsage(PROMPT, ANSWER))  # a whole answer

    info = ModelInfo("fn-model", input_cost_per_token=IN, output_cost_per_token=OUT)
    model = FnModel(rule, replace(info, max_output_tokens=ANSWER), delay=0.3)
    w = world(model, daily_budget_usd=1.0)
    guard = BudgetGuard(w.redis, w.settings)
    rid = await guard.reserve("web:u0", 0.0)
    await guard.record("web:u0", rid, 0.90)  # earlier today
    await w.start()
    threads = [ThreadKey("web", "local", f"budget-{i}") for i in range(8)]
    for i, t in enumerate(threads):  # eight people at once, all in flight together
        await w.send(user_event(t, "hi", user=f"u{i + 1}"))
    for t in threads:
        await w.settle(t)

    real = PROMPT * IN + ANSWER * OUT  # what each call that ran cost
    ran = len(model.requests)
    day = (await guard.spend("web:u1")).day_usd
    assert ran >= 1
    assert day - 1.0 <= real, f"day ${day:.3f}: {ran} calls ran, over by {(day - 1) / real:.1f}"


def test_a_reservation_covers_the_requests_own_answer_limit() -> None:
    info = ModelInfo("m", input_cost_per_token=IN, output_cost_per_token=OUT)
    assert reserved_cost(info, 1000, 200) == 1000 * IN + 200 * OUT
    assert (
        reserved_cost(replace(info, max_output_tokens=ANSWER), 1000, None)
        == 1000 * IN + ANSWER * OUT
    )
    assert reserved_cost(info, 1000, None) == 1000 * IN + 4096 * OUT  # none said: the default
