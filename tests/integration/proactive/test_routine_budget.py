"""Light routines and the heartbeat are held to the budgets like a person's turns.

Each makes one call to the cheap model with no person in the loop: without the
budgets a routine firing every minute could spend past DAILY_BUDGET_USD.
"""

from __future__ import annotations

from typing import Any

from agent_core.agent.budget import BudgetGuard
from agent_core.llm.base import Completion, ModelInfo, TokenUsage
from agent_core.proactive.routines import Routine, parse_add, validate
from agent_core.settings import CoreSettings
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel
from tests.integration.proactive.test_scheduler import TG, texts_to

PRICE = ModelInfo("cheap", input_cost_per_token=0.0, output_cost_per_token=0.001)


def priced(text: str) -> FnModel:
    """Every answer costs $0.10 (100 output tokens at $0.001)."""
    return FnModel(lambda req: Completion(text, usage=TokenUsage(output=100)), PRICE)


async def test_a_light_routine_is_billed_to_its_creator_and_stops_at_their_budget(
    pworld: Any,
) -> None:
    model = priced("Standup at 10.")
    w = pworld(model, user_daily_budget_usd=0.15)
    await w.start()
    p = w.proactive()
    r = validate(
        Routine("standup", "manual", "remind", notify="telegram:500", created_by="telegram:u9")
    )
    assert await p.store.add(r)
    assert await p.runner.run(r, "manual", "f1") == "sent"
    guard = BudgetGuard(w.redis, CoreSettings(user_daily_budget_usd=0.15))
    spend = await guard.spend("telegram:u9")
    assert abs(spend.user_usd - 0.10) < 1e-9 and abs(spend.day_usd - 0.10) < 1e-9
    assert await p.runner.run(r, "manual", "f2") == "sent"  # $0.10 < $0.15: still allowed
    calls = len(model.requests)
    assert await p.runner.run(r, "manual", "f3") == "skipped: over budget"
    assert len(model.requests) == calls  # refused before the call
    assert texts_to(w, TG) == ["Standup at 10.", "Standup at 10."]
    assert (await p.store.state("standup")).outcome == "skipped: over budget"


async def test_the_heartbeat_stops_at_the_daily_budget(pworld: Any) -> None:
    model = priced("The disk is full.")
    w = pworld(model, daily_budget_usd=0.05)
    await w.start()
    p = w.proactive(heartbeat_enabled=True, heartbeat_notify="telegram:500")
    assert p.heartbeat is not None
    await w.redis.set(keys.HEARTBEAT_CHECKLIST, "- disk?")
    assert await p.heartbeat.tick() == "sent"
    assert await p.heartbeat.tick() == "skipped: over budget"
    assert len(model.requests) == 1
    assert texts_to(w, TG) == ["The disk is full."]


async def test_admins_are_warned_in_words_that_fit_a_scheduled_account(pworld: Any) -> None:
    model = priced("The disk is full.")
    w = pworld(model, user_daily_budget_usd=0.12, admin_ids="telegram:admin")
    await w.start()
    admin_dm = "telegram:bot1:admin-dm:"
    await w.redis.set(keys.admin_thread("telegram:admin"), admin_dm)
    p = w.proactive(heartbeat_enabled=True, heartbeat_notify="telegram:500")
    assert p.heartbeat is not None
    await w.redis.set(keys.HEARTBEAT_CHECKLIST, "- disk?")
    assert await p.heartbeat.tick() == "sent"  # $0.10 of $0.12: over 80 %
    warnings = [s.message.text for s in w.outbox.sends(admin_dm) if "80 %" in s.message.text]
    assert warnings == [
        "⚠️ The heartbeat account (scheduled model calls) has used 80 % of the "
        "per-person daily AI budget ($0.12)."
    ], warnings


async def test_a_routine_added_from_the_shell_is_billed_to_the_routine_account(
    pworld: Any,
) -> None:
    """`parley routines add` stores created_by='cli'; its calls were booked to an
    account 'cli', where the docs say `routine` (not created from a chat)."""
    w = pworld(priced("Backup done."), user_daily_budget_usd=1.0)
    await w.start()
    p = w.proactive()
    r = validate(parse_add("nightly --manual --notify telegram:500 check", created_by="cli"))
    assert await p.store.add(r)
    assert await p.runner.run(r, "manual", "f1") == "sent"
    guard = BudgetGuard(w.redis, CoreSettings(user_daily_budget_usd=1.0))
    assert abs((await guard.spend("routine")).user_usd - 0.10) < 1e-9
    assert (await guard.spend("cli")).user_usd == 0
