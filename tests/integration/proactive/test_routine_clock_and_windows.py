"""Routines: a fixed-hour schedule (several minutes, or an @-alias) fires once when
clocks go back; a text dropped by an event routine's cooldown is not marked as
seen for its dedup window."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.proactive.routines import RoutineStore
from agent_core.proactive.runner import EventTriggers
from agent_core.store import keys
from tests.fakes.llm_servers import FakeClock
from tests.integration.agent.conftest import FnModel, user_event
from tests.integration.proactive.test_routine_edges import add, ts


async def fall_back_night(pworld: Any, tz: str, until: str, crons: dict[str, str]) -> Any:
    """Routines named and scheduled by ``crons`` in ``tz``, ticked every minute from
    noon on 2026-10-31 (the day before clocks go back) until ``until``; their store."""
    w = pworld(FnModel(lambda req: Completion("tick")))
    await w.start()
    start = ts("2026-10-31 12:00", tz)
    clock = FakeClock(start=start)
    p = w.proactive(clock)
    for name, cron in crons.items():
        await add(
            p.store, name=name, trigger="cron", cron=cron, tz=tz, prompt="x", created_at=start
        )
    while clock() < ts(until, tz):
        clock.advance(60)
        await p.scheduler.tick()
    await p.scheduler.wait_idle()
    return p.store


# --- DST fall-back: a fixed hour fires in the first copy of the repeated hour only -----
async def test_fixed_hour_routine_with_two_minutes_fires_once_each_on_fall_back(
    pworld: Any,
) -> None:
    # 01:00-01:59 happens twice in New York on 2026-11-01: 01:00 and 01:30 once each
    store = await fall_back_night(
        pworld, "America/New_York", "2026-11-01 06:00", {"twice": "0,30 1 * * *"}
    )
    assert (await store.state("twice")).runs == 2


async def test_daily_alias_fires_once_when_midnight_repeats(pworld: Any) -> None:
    # Havana goes back from 01:00 to 00:00 on 2026-11-01: midnight happens twice, and
    # @daily is 0 0 * * *
    store = await fall_back_night(
        pworld, "America/Havana", "2026-11-01 12:00", {"plain": "0 0 * * *", "alias": "@daily"}
    )
    plain = (await store.state("plain")).runs
    alias = (await store.state("alias")).runs
    assert (plain, alias) == (1, 1), f"0 0 * * * ran {plain}x, @daily ran {alias}x"


# --- a message ignored in the cooldown keeps its dedup chance -------------------------
async def test_text_dropped_by_cooldown_still_triggers_after_it(pworld: Any) -> None:
    """docs: "--dedup S: the same text triggers once per window".  runner.py sets the
    dedup key *before* checking the cooldown, so a text that arrived during another
    text's cooldown (and triggered nothing) is suppressed for the whole dedup window:
    it triggers zero times."""
    w = pworld(FnModel(lambda req: Completion("echo")))
    store = RoutineStore(w.redis)
    w.ingest.add_filter(EventTriggers(w.redis, store, refresh_secs=0))
    await w.start()
    await add(
        store,
        name="outage",
        trigger="event",
        pattern=r"\bdown\b",
        prompt="summarise",
        cooldown_secs=0.5,
        dedup_secs=600,
    )
    chat = ThreadKey("telegram", "bot1", "77")
    await w.send(user_event(chat, "db is down"))  # triggers; cooldown starts
    await w.send(user_event(chat, "web is down"))  # in the cooldown: not acted on
    assert await w.redis.llen(keys.ROUTINE_QUEUE) == 1
    await asyncio.sleep(0.7)  # cooldown over
    await w.send(user_event(chat, "web is down"))  # never triggered before: should now
    assert await w.redis.llen(keys.ROUTINE_QUEUE) == 2, "'web is down' never triggered"


# --- 4. notes: a message folded into another person's turn uses that person's notes ----
