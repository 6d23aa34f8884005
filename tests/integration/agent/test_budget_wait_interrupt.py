"""/interrupt ends a call's wait for room in the budget at once.

When what is left of a budget is held by calls in flight, a call waits up to 20 s
for them to settle (budget.py).  That wait did not listen for /interrupt: the
person who sent it still waited out the 20 s and was then told the budget was
nearly reached.  Now it stops like a call cut off while it streams: "Stopped", no
call to the model, nothing billed, and no reservation left behind."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.agent.budget import BudgetGuard
from agent_core.agent.interrupt import interrupt_filter
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, ModelInfo, TokenUsage
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, user_event


async def test_interrupt_ends_the_wait_for_calls_in_flight(world: Any) -> None:
    T = ThreadKey("telegram", "bot", "dm-wait")
    info = ModelInfo("p", input_cost_per_token=1e-6, output_cost_per_token=1e-6)
    model = FnModel(lambda req: Completion("ok", usage=TokenUsage(100, 5)), info)
    w = world(model, daily_budget_usd=1.0)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    guard = BudgetGuard(w.redis, w.settings)
    other = await guard.reserve("telegram:other", 1.0)  # a call in flight holds the day
    reserved = keys.budget_reserved(guard.day())
    try:
        await w.send(user_event(T, "hello"))
        for _ in range(500):  # the turn has begun, and checked the budget
            if await w.redis.exists(keys.lock(T)):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # it waits for the other call to settle
        await w.send(user_event(T, "/interrupt"))
        await w.settle(T, timeout=40)  # (long enough for the 20 s wait it had before)
        # ended by the interrupt, not by room being made: the other call still holds it
        held = await w.redis.hgetall(reserved)
    finally:
        await guard.record("telegram:other", other, 0.0)
    said = w.texts(T)
    assert any("Stopped" in t for t in said), said
    assert not any("nearly reached" in t for t in said), said
    assert list(held) == [other.encode()], held  # the turn's check left nothing
    assert model.requests == []  # no call was made
    spend = await guard.spend("telegram:u1")
    assert (spend.user_usd, spend.day_usd) == (0.0, 0.0)  # nothing billed
    assert (await w.session(T)).cost_usd == 0.0


async def test_the_turns_timeout_ends_the_wait_too(world: Any) -> None:
    """TURN_TIMEOUT_SECS cancels the turn's task, so the wait ends with it; it did
    before the fix too (a guard: the wait must stay cancellable).  A check cut off
    in flight gives its reservation back: test_budget_record_retry.py."""
    T = ThreadKey("telegram", "bot", "dm-wait-timeout")
    info = ModelInfo("p", input_cost_per_token=1e-6, output_cost_per_token=1e-6)
    model = FnModel(lambda req: Completion("ok", usage=TokenUsage(100, 5)), info)
    w = world(model, daily_budget_usd=1.0, turn_timeout_secs=1.0)
    await w.start()
    guard = BudgetGuard(w.redis, w.settings)
    other = await guard.reserve("telegram:other", 1.0)
    try:
        await w.send(user_event(T, "hello"))
        await w.settle(T, timeout=40)
        held = await w.redis.hgetall(keys.budget_reserved(guard.day()))
    finally:
        await guard.record("telegram:other", other, 0.0)
    said = w.texts(T)
    assert any("took longer than 1 seconds" in t for t in said), said
    assert list(held) == [other.encode()], held  # still in flight: not what ended it
    assert model.requests == []
    assert (await guard.spend("telegram:u1")).day_usd == 0.0
