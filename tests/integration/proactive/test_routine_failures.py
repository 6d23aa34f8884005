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
