"""`/routine remove` forgets everything of the routine, its dedup keys included."""

from __future__ import annotations

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
