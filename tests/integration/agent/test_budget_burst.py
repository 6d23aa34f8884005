"""With LLM_MAX_TOKENS raised (16,384: a long-answer setup) each call reserves ~$0.25
of a $1.00 day on a $3/$15 model.  Eight people writing at once, with nothing spent
today and each call costing ~$0.0004: the fifth and later were told "The daily AI
budget for this bot is used up", which was false.  Now a call whose budget is only
reserved by calls in flight waits for them to settle."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent_core.agent.budget import BudgetGuard
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, ModelInfo, TokenUsage
from tests.integration.agent.conftest import FnModel, user_event

IN, OUT = 3e-6, 15e-6


async def test_nothing_spent_yet_nobody_is_told_the_budget_is_used_up(world: Any) -> None:
    def rule(req: CompletionRequest) -> Completion:
        return Completion("ok", usage=TokenUsage(100, 5))

    info = ModelInfo("fn-model", input_cost_per_token=IN, output_cost_per_token=OUT)
    model = FnModel(rule, replace(info, max_output_tokens=16_384), delay=0.3)
    w = world(model, daily_budget_usd=1.0)
    await w.start()
    threads = [ThreadKey("web", "local", f"rsv-{i}") for i in range(8)]
    for i, t in enumerate(threads):
        await w.send(user_event(t, "hi", user=f"p{i}"))
    for t in threads:
        await w.settle(t)
    said = {str(t): w.texts(t) for t in threads}
    refused = [k for k, v in said.items() if any("used up" in x for x in v)]
    day = (await BudgetGuard(w.redis, w.settings).spend("web:p0")).day_usd
    assert not refused, f"${day:.4f} spent of $1.00, yet refused: {refused} {said[refused[0]]}"


async def test_a_reservation_above_a_small_budget_does_not_refuse_a_lone_call(world: Any) -> None:
    """$0.05 a person, a 4,096-token answer reserves $0.06: the check counts other
    calls' reservations, not the call's own, so a lone call is never refused by it."""

    def rule(req: CompletionRequest) -> Completion:
        return Completion("ok", usage=TokenUsage(100, 5))

    info = ModelInfo("fn-model", input_cost_per_token=IN, output_cost_per_token=OUT)
    w = world(FnModel(rule, replace(info, max_output_tokens=4096)), user_daily_budget_usd=0.05)
    await w.start()
    t = ThreadKey("web", "local", "rsv-lone")
    for _ in range(3):
        await w.send(user_event(t, "hi", user="solo"))
        await w.settle(t)
    assert w.texts(t) == ["ok"] * 3, w.texts(t)


async def test_the_hourly_limit_is_said_even_while_calls_in_flight_fill_the_day(
    redis: Any,
) -> None:
    """Over the hourly action limit while the day's budget is reserved by a call in
    flight: the person waited 20 s and was told the budget was nearly reached,
    instead of the hourly limit at once."""
    from agent_core.agent.budget import BudgetRefused
    from agent_core.settings import CoreSettings

    guard = BudgetGuard(redis, CoreSettings(daily_budget_usd=1.0, hourly_action_limit=1))
    assert await guard.reserve("web:p1", 1.0)  # in flight, reserving the whole day
    with pytest.raises(BudgetRefused, match="AI calls per hour"):
        await guard.reserve("web:p1", 0.01)
