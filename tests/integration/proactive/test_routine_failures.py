"""Routines that fail: a window too small for Redis, a full job that cannot be
submitted, a target chat that is gone, a cron fire cut off by a stopping worker."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.proactive.routines import Routine, RoutineError, RoutineStore, parse_add, validate
from agent_core.proactive.runner import EventTriggers
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, user_event


# --- a cooldown / dedup window under 1 ms ---------------------------------------
@pytest.mark.parametrize("flag", ["--cooldown 0.0004", "--dedup 0.0001"])
def test_a_window_under_one_millisecond_is_refused(flag: str) -> None:
    with pytest.raises(RoutineError, match=r"at least 0\.001 s"):
        validate(parse_add(f"aaa --event hello {flag} --notify telegram:500 x", created_by="c:1"))


async def test_a_stored_tiny_window_does_not_silence_the_event_routines_after_it(
    pworld: Any,
) -> None:
    """A routine stored with a 0.4 ms cooldown (before such windows were refused) made
    Redis refuse its SET PX 0, and the error stopped the loop: 'bbb' never ran."""
    w = pworld(FnModel(lambda req: Completion("echo")))
    store = RoutineStore(w.redis)
    w.ingest.add_filter(EventTriggers(w.redis, store, refresh_secs=0))
    await w.start()
    a = validate(parse_add("aaa --event hello --notify telegram:500 x", created_by="c:1"))
    a.cooldown_secs = 0.0004  # as stored by an older version
    b = validate(parse_add("bbb --event hello --notify telegram:500 y", created_by="c:1"))
    assert await store.add(a) and await store.add(b)
    res = await w.ingest.submit(user_event(ThreadKey("telegram", "bot1", "77"), "hello there"))
    assert res.value == "accepted"
    queued = await w.redis.lrange(keys.ROUTINE_QUEUE, 0, -1)
    assert len(queued) == 2, queued


async def test_one_routine_failing_on_a_message_leaves_the_others_their_turn(
    pworld: Any,
) -> None:
    w = pworld(FnModel(lambda req: Completion("echo")))
    store = RoutineStore(w.redis)
    triggers = EventTriggers(w.redis, store, refresh_secs=0)
    w.ingest.add_filter(triggers)
    await w.start()
    for name in ("aaa", "bbb"):
        r = validate(parse_add(f"{name} --event hello --notify telegram:500 x", created_by="c:1"))
        assert await store.add(r)
    real = triggers._maybe_queue

    async def flaky(r: Routine, event: Any) -> None:
        if r.name == "aaa":
            raise RuntimeError("boom")
        await real(r, event)

    triggers._maybe_queue = flaky  # type: ignore[method-assign]
    res = await w.ingest.submit(user_event(ThreadKey("telegram", "bot1", "77"), "hello"))
    assert res.value == "accepted"
    assert len(await w.redis.lrange(keys.ROUTINE_QUEUE, 0, -1)) == 1


# --- a full job that cannot be submitted ----------------------------------------
async def test_a_full_job_that_fails_to_submit_frees_its_slot(pworld: Any) -> None:
    """slack:C0123 with no team known: resolving the target raises TargetError.  The
    slot taken for the run was kept (~11 minutes), so the next fire was recorded
    'skipped: 1 run(s) already in flight' instead of failing for its real reason."""
    w = pworld(FnModel(lambda req: Completion("echo")))
    await w.start()
    p = w.proactive()
    r = validate(
        Routine(name="full1", trigger="manual", action="full", prompt="x", notify="slack:C0123")
    )
    assert await p.store.add(r)
    for _ in range(2):
        await p.store.queue_run("full1")
        await p.scheduler.tick()
        await p.scheduler.wait_idle()
    outcomes = [x.outcome for x in await p.store.runs("full1")]
    assert len(outcomes) == 2
    assert all(o.startswith("error: TargetError") for o in outcomes), outcomes
    assert await w.redis.zcard(keys.routine_running("full1")) == 0
