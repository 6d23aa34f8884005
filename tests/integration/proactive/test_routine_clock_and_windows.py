"""Routines: a fixed-hour schedule (several minutes, or an @-alias) fires once when
clocks go back; a text dropped by an event routine's cooldown is not marked as
seen for its dedup window."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.proactive.routines import RoutineStore
from agent_core.proactive.runner import EventTriggers
from agent_core.store import keys
from tests.fakes.llm_servers import FakeClock
from tests.integration.agent.conftest import FnModel, user_event
from tests.integration.proactive.test_routine_edges import add, ts


async def fires_through(p: Any, clock: FakeClock, end: float, tz: str) -> list[str]:
    """Tick every minute until ``end``; the local times fired at."""
    fired: list[str] = []
    while clock() < end:
        clock.advance(60)
        for _ in await p.scheduler.tick():
            fired.append(datetime.fromtimestamp(clock(), ZoneInfo(tz)).strftime("%H:%M%z"))
    await p.scheduler.wait_idle()
    return fired


# --- 1. DST fall-back: a fixed-hour routine with several minutes fires in both hours ---
async def test_fixed_hour_routine_with_two_minutes_fires_once_each_on_fall_back(
    pworld: Any,
) -> None:
    """docs/proactive.md: "When clocks go back, a routine with a fixed hour fires at the
    first of the two repeated wall-clock times only".  `0,30 1 * * *` in New York on
    2026-11-01 (01:00-01:59 happens twice) should fire at 01:00 and 01:30 once each."""
    p_tz = "America/New_York"
    w = pworld(FnModel(lambda req: Completion("tick")))
    await w.start()
    start = ts("2026-10-31 12:00", p_tz)
    clock = FakeClock(start=start)
    p = w.proactive(clock)
    await add(
        p.store,
        name="twice",
        trigger="cron",
        cron="0,30 1 * * *",
        tz=p_tz,
        prompt="x",
        created_at=start,
    )
    fired = await fires_through(p, clock, ts("2026-11-01 06:00", p_tz), p_tz)
    assert len(fired) == 2, f"fired {len(fired)} times: {fired}"


# --- 2. an @alias is never treated as a fixed hour: @daily fires twice ---------------
async def test_daily_alias_fires_once_when_midnight_repeats(pworld: Any) -> None:
    """`@daily` is `0 0 * * *`.  In America/Havana clocks go back at 01:00 to 00:00 on
    2026-11-01, so midnight happens twice.  `0 0 * * *` fires once that day; `@daily`
    (startswith('@') -> not a "fixed hour") fires twice."""
    p_tz = "America/Havana"
    w = pworld(FnModel(lambda req: Completion("daily")))
    await w.start()
    start = ts("2026-10-31 12:00", p_tz)
    clock = FakeClock(start=start)
    p = w.proactive(clock)
    await add(
        p.store,
        name="plain",
        trigger="cron",
        cron="0 0 * * *",
        tz=p_tz,
        prompt="x",
        created_at=start,
    )
    await add(
        p.store, name="alias", trigger="cron", cron="@daily", tz=p_tz, prompt="x", created_at=start
    )
    end = ts("2026-11-01 12:00", p_tz)
    while clock() < end:
        clock.advance(60)
        await p.scheduler.tick()
    await p.scheduler.wait_idle()
    plain = (await p.store.state("plain")).runs
    alias = (await p.store.state("alias")).runs
    assert (plain, alias) == (1, 1), f"0 0 * * * ran {plain}x, @daily ran {alias}x"


# --- 3. a message ignored in the cooldown still uses up its dedup window ---------------
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
