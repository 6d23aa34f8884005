"""A model call cut off by /interrupt is still booked against the budgets (the
provider bills it): an estimate of its prompt and of what it streamed."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.agent.budget import BudgetGuard
from agent_core.agent.interrupt import interrupt_filter
from agent_core.agent.tokens import tools_tokens
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, ModelInfo, TokenUsage
from agent_core.settings import CoreSettings
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, user_event


async def test_interrupted_model_calls_still_count_against_the_budget(world: Any) -> None:
    T = ThreadKey("telegram", "bot", "dm-budget")
    info = ModelInfo("p", input_cost_per_token=0.001, output_cost_per_token=0.001)
    model = FnModel(lambda req: Completion("a long answer"), info, delay=3.0)
    w = world(model, user_daily_budget_usd=5.0, daily_budget_usd=5.0)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    for i in range(3):
        await w.send(user_event(T, f"write me a long essay, number {i} " + "please " * 20))
        await asyncio.sleep(0.6)  # the model call is under way
        await w.send(user_event(T, "/interrupt"))
        await w.settle(T, timeout=15)
    assert len(model.requests) == 3  # three calls reached the provider
    assert sum("Stopped" in t for t in w.texts(T)) == 3, w.texts(T)
    spend = await BudgetGuard(w.redis, w.settings).spend("telegram:u1")
    # each prompt is some tens of tokens and the tools' specs, at $0.001 a token
    specs = tools_tokens(w.workers[0][0].agent.tools.specs()) * 0.001
    assert 3 * (0.02 + specs) < spend.user_usd < 3 * (0.5 + specs), spend
    assert spend.day_usd == spend.user_usd
    assert (await w.session(T)).cost_usd == spend.user_usd


async def test_spend_is_counted_with_no_budget_set_and_cost_says_so(world: Any) -> None:
    """With no limit set, nothing was booked: /cost said "$0.0000 by you, $0.0000 by
    everyone" after paid calls, and a budget set mid-day started from zero."""
    T = ThreadKey("telegram", "bot", "dm-nobudget")
    info = ModelInfo("p", input_cost_per_token=0.0, output_cost_per_token=0.001)
    model = FnModel(lambda req: Completion("hi", usage=TokenUsage(output=100)), info)
    w = world(model)  # no DAILY_BUDGET_USD, USER_DAILY_BUDGET_USD, HOURLY_ACTION_LIMIT
    await w.start()
    await w.send(user_event(T, "hello"))
    await w.settle(T)
    # no round trip of its own on every turn: booked with the next metrics flush
    day = BudgetGuard(w.redis, CoreSettings()).day()
    assert await w.redis.get(keys.budget_user(day, "telegram:u1")) is None
    await w.send(user_event(T, "/cost"))
    await w.settle(T)
    assert "Today (UTC): $0.1000 by you, $0.1000 by everyone." in w.texts(T)[-1], w.texts(T)
    later = BudgetGuard(w.redis, CoreSettings(daily_budget_usd=1.0))  # set mid-day
    spend = await later.spend("telegram:u1")
    assert abs(spend.day_usd - 0.1) < 1e-9 and abs(spend.user_usd - 0.1) < 1e-9
