"""`/routine remove` forgets everything of the routine, its dedup keys included."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.proactive.routines import Routine, validate
from agent_core.proactive.runner import EventTriggers
from agent_core.store import keys
from tests.fakes.llm_servers import FakeClock
from tests.integration.agent.conftest import FnModel, user_event

T = ThreadKey("telegram", "bot1", "500")


def watcher(name: str) -> Routine:
    return validate(
        Routine(
            name=name,
            trigger="event",
            pattern="down",
            notify="telegram:500",
            prompt="Summarise.",
            cooldown_secs=0,
            dedup_secs=86_400,
        )
    )


async def test_a_routine_added_again_is_not_muted_by_the_removed_ones_dedup(pworld: Any) -> None:
    """A routine removed and added again under the same name stayed silent for a
    message the old one had already seen (its dedup keys outlived it, up to 30 days)."""
    w = pworld(FnModel(lambda req: Completion("x")))
    await w.start()
    p = w.proactive(FakeClock())
    trig = EventTriggers(w.redis, p.store, refresh_secs=0)
    assert await p.store.add(watcher("outage"))
    assert await p.store.add(watcher("outage-2"))
    await trig(user_event(T, "db down"))
    assert await w.redis.llen(keys.ROUTINE_QUEUE) == 2
    await w.redis.delete(keys.ROUTINE_QUEUE)

    assert await p.store.remove("outage")
    assert await p.store.add(watcher("outage"))  # a fresh routine with the same name
    await trig(user_event(T, "db down"))
    queued = [x.decode() for x in await w.redis.lrange(keys.ROUTINE_QUEUE, 0, -1)]
    # the new one runs; the other routine's dedup window is untouched
    assert len(queued) == 1 and '"r":"outage"' in queued[0], queued


# --- a run in flight when its routine is removed ------------------------------------
def manual(prompt: str, **kw: Any) -> Routine:
    return validate(
        Routine(name="news", trigger="manual", prompt=prompt, notify="telegram:500", **kw)
    )


async def test_a_run_in_flight_does_not_write_into_the_routine_added_again(pworld: Any) -> None:
    """`/routine remove` while a run was in flight: the run still wrote its record
    (state, last runs) afterwards into whatever routine bore the name next."""
    w = pworld(FnModel(lambda req: Completion("news"), delay=0.5))
    await w.start()
    p = w.proactive()
    assert await p.store.add(manual("old prompt"))
    await p.store.queue_run("news")
    assert await p.scheduler.tick() == ["news"]
    await asyncio.sleep(0.1)  # the old routine's model call is in flight
    assert await p.store.remove("news")
    assert await p.store.add(manual("a new routine"))
    await p.scheduler.wait_idle()
    st = await p.store.state("news")
    assert st.runs == 0 and await p.store.runs("news") == [], st
    # the routine added again records its own runs
    await p.store.queue_run("news")
    assert await p.scheduler.tick() == ["news"]
    await p.scheduler.wait_idle()
    assert [x.outcome for x in await p.store.runs("news")] == ["sent"]


async def test_a_full_job_in_flight_does_not_write_into_the_routine_added_again(
    pworld: Any,
) -> None:
    """The same for a full job, whose outcome is recorded when its turn ends."""
    w = pworld(FnModel(lambda req: Completion("done"), delay=0.5))
    await w.start()
    p = w.proactive()
    assert await p.store.add(manual("old job", action="full"))
    await p.store.queue_run("news")
    assert await p.scheduler.tick() == ["news"]
    await p.scheduler.wait_idle()  # submitted; its turn runs
    await asyncio.sleep(0.1)
    assert await p.store.remove("news")
    assert await p.store.add(manual("a new job", action="full"))
    await w.settle(T)
    assert "done" in w.texts(T)  # the old job's turn did finish
    assert (await p.store.state("news")).runs == 0
    assert await p.store.runs("news") == []


async def test_send_failures_of_a_removed_routine_neither_count_nor_pause(pworld: Any) -> None:
    """A permanent send failure of the old routine's run was counted for (and could
    pause) the routine added again under its name."""
    w = pworld(FnModel(lambda req: Completion("news")))
    await w.start()
    p = w.proactive()
    old = manual("old prompt")
    assert await p.store.add(old)
    assert await p.store.remove("news")
    new = manual("a new routine")
    new.created_at = old.created_at + 1
    assert await p.store.add(new)
    await w.redis.hset(keys.routine_state("news"), "send_failures", 2)
    assert await p.store.count_send_failure("news", created_at=old.created_at) == -1
    assert await p.store.set_enabled("news", False, created_at=old.created_at) is None
    assert (await p.store.state("news")).runs == 0
    stored = await p.store.get("news")
    assert stored is not None and stored.enabled
    assert await w.redis.hget(keys.routine_state("news"), "send_failures") == b"2"
    # the routine's own run counts and pauses as before
    assert await p.store.count_send_failure("news", created_at=new.created_at) == 3
    paused = await p.store.set_enabled("news", False, created_at=new.created_at)
    assert paused is not None and not paused.enabled
    stored = await p.store.get("news")
    assert stored is not None and not stored.enabled and stored.prompt == "a new routine"
