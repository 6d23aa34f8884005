"""One poll of the interrupt flags for every waiting turn of a process."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agent_core.agent.interrupt import InterruptWatch


async def _gets(redis: Any) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_get", {}).get("calls", 0))


async def test_one_read_per_flag_per_tick_whatever_the_number_of_turns(redis: Any) -> None:
    watch = InterruptWatch(redis, poll_secs=3600)  # ticks driven by hand
    now = int(time.time() * 1000)
    await redis.set("t:a:interrupt", now + 5)  # asked after the turns began
    await redis.set("t:b:interrupt", now - 60_000)  # an old /interrupt: not these turns
    await redis.set("t:c:interrupt", b"x")  # already consumed
    lost = {"yes": False}
    watches = [
        watch.watch(f"t:{k}:interrupt", now, lambda: False) for k in "abcd" for _ in range(100)
    ]
    locked_out = watch.watch("t:e:interrupt", now, lambda: lost["yes"])
    before = await _gets(redis)
    await watch.poll_once()
    assert await _gets(redis) - before == 5  # five flags, not 401 turns
    fired = {w.key for w in watches if w.fired.done()}
    assert fired == {"t:a:interrupt"}
    assert not locked_out.fired.done()
    lost["yes"] = True
    await watch.poll_once()
    assert locked_out.fired.done()  # a lost lock stops the wait too
    for w in [*watches, locked_out]:
        watch.unwatch(w)
    assert not watch.watches
    if watch._task is not None:
        watch._task.cancel()


async def test_the_loop_runs_only_while_someone_watches(redis: Any) -> None:
    watch = InterruptWatch(redis, poll_secs=0.02)
    w = watch.watch("t:z:interrupt", int(time.time() * 1000), lambda: False)
    task = watch._task
    assert task is not None and not task.done()
    await redis.set("t:z:interrupt", int(time.time() * 1000) + 1)
    await asyncio.wait_for(w.fired, 2)  # the background tick saw it
    watch.unwatch(w)
    await asyncio.wait_for(task, 2)  # and stopped once nobody watched
    w2 = watch.watch("t:z2:interrupt", 0, lambda: True)
    await asyncio.wait_for(w2.fired, 2)  # a new watch starts it again
    watch.unwatch(w2)
