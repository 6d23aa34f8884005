"""A leader that dies without stopping (SIGKILL, out of memory) while a routine run
is in flight: the next leader runs it again, once; a second death gives it up.

A death is simulated by leaving the leader's runs hanging forever, never cancelled
(so none of the graceful stop's give-back runs), and its alive key gone (as it is
a lease after the process's last renewal).  The hanging tasks are cancelled only
after the assertions, to end the test cleanly.  The next leader takes a run over
once it has seen the alive key missing at two looks lease/2 apart (:func:`_looks`).

Also: runs this process took and no task of it runs (a Redis error between taking
and starting, a record not removed when its run ended), runs found too late, and a
living owner whose alive key lapsed in a Redis outage.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.proactive.routines import Routine, RoutineStore, validate
from agent_core.proactive.scheduler import GIVEN_UP, RUN_AGAIN, STALE_SECS, TOO_LATE
from agent_core.store import keys
from tests.fakes.llm_servers import FakeClock
from tests.integration.agent.conftest import FnModel
from tests.integration.proactive.test_scheduler import TG, texts_to

LEASE = 15.0  # SCHEDULER_LEASE_SECS's default
ADMIN = "telegram:900"
ADMIN_DM = ThreadKey("telegram", "bot1", "900")
DUE = 1_767_229_200  # 01:00, the hourly routine's first fire


class Dying:
    """Makes ``p``'s runs hang at ``attr`` of its runner (the model call, a full
    job's submission), then kills ``p``: its runs are abandoned, its alive key gone."""

    def __init__(self, p: Any, attr: str, *, after: bool = False) -> None:
        self.p = p
        self.hanging = asyncio.Event()
        self.abandoned: set[asyncio.Task[Any]] = set()
        real: Callable[..., Any] = getattr(p.runner, attr)

        async def hang(*a: Any, **k: Any) -> Any:
            if after:  # the step's work is done (a submission got in), then the death
                await real(*a, **k)
            self.hanging.set()
            await asyncio.Event().wait()

        setattr(p.runner, attr, hang)

    async def kill(self) -> None:
        await self.hanging.wait()
        self.abandoned |= self.p.scheduler.tasks
        self.p.scheduler.tasks.clear()
        await self.p.scheduler.redis.delete(keys.routine_alive(self.p.scheduler.owner))

    async def bury(self) -> None:
        for t in self.abandoned:
            t.cancel()
        await asyncio.gather(*self.abandoned, return_exceptions=True)


async def _world(pworld: Any, **routine: Any) -> tuple[Any, FakeClock]:
    w = pworld(FnModel(lambda req: Completion("report")), admin_ids=ADMIN)
    await w.start()
    clock = FakeClock(start=1_767_225_600.0)  # 2026-01-01 00:00 UTC
    routine.setdefault("prompt", "x")
    r = validate(Routine(notify="telegram:500", created_at=clock(), created_by="cli", **routine))
    assert await RoutineStore(w.redis).add(r)  # (a Proactive more would add a turn hook)
    return w, clock


async def _hourly(pworld: Any) -> tuple[Any, FakeClock]:
    return await _world(pworld, name="hourly", trigger="cron", cron="0 * * * *")


async def _inflight(w: Any) -> dict[bytes, bytes]:
    return dict(await w.redis.hgetall(keys.ROUTINE_INFLIGHT))


async def _hourly_fire_dies(w: Any, clock: FakeClock) -> Dying:
    """Leader "a" fires the hourly routine and dies in its model call (last fire and
    claim written, the run never ends).  Returns the ``Dying`` to bury."""
    a = w.proactive(clock, owner="a")
    dying = Dying(a, "_light")
    clock.advance(3600 + 1)
    assert await a.scheduler.tick() == ["hourly"]
    await dying.kill()
    return dying


def _hold_light(p: Any) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold ``p``'s model calls: each sets ``hanging`` and waits for ``gate``.
    Returns ``(gate, hanging)``."""
    gate, hanging = asyncio.Event(), asyncio.Event()
    real = p.runner._light

    async def slow(*args: Any, **kw: Any) -> str:
        hanging.set()
        await gate.wait()
        return await real(*args, **kw)

    p.runner._light = slow  # type: ignore[method-assign]
    return gate, hanging


async def _looks(*ps: Any, clock: FakeClock) -> None:
    """The leaders' first look at a dead owner's missing alive key: nothing is taken
    over yet (a living owner back from a Redis outage renews it first); lease/2
    later the next look does (a longer gap between looks would start the count
    over: the owner may have renewed meanwhile, unseen)."""
    for p in ps:
        assert await p.scheduler.tick() == []
    clock.advance(LEASE / 2)


async def test_a_cron_fire_in_flight_on_a_killed_leader_runs_once_on_the_next(
    pworld: Any,
) -> None:
    w, clock = await _hourly(pworld)
    dying = await _hourly_fire_dies(w, clock)  # the run never ends

    b = w.proactive(clock, owner="b")  # takes the lease
    clock.advance(30)
    await _looks(b, clock=clock)
    assert await b.scheduler.tick() == ["hourly"]  # run again
    await b.scheduler.wait_idle()
    for _ in range(3):
        assert await b.scheduler.tick() == []  # once, not again
    assert texts_to(w, TG) == ["report"]
    outcomes = [x.outcome for x in await b.store.runs("hourly")]
    assert outcomes == ["sent", RUN_AGAIN]
    assert await _inflight(w) == {}
    assert await w.redis.zcard(keys.routine_running("hourly")) == 0  # the dead slot too
    # the due time stays fired (claimed by the dead leader), the schedule goes on
    assert await w.redis.get(keys.routine_fire("hourly", DUE)) == b"a"
    clock.advance(3600)
    assert await b.scheduler.tick() == ["hourly"]
    await b.scheduler.wait_idle()
    assert texts_to(w, TG) == ["report", "report"]
    await dying.bury()


async def test_a_queued_run_taken_by_a_killed_leader_runs_once_on_the_next(
    pworld: Any,
) -> None:
    w, clock = await _world(pworld, name="manual", trigger="manual")
    a = w.proactive(clock, owner="a")
    dying = Dying(a, "_light")
    await a.store.queue_run("manual")
    assert await a.scheduler.tick() == ["manual"]
    await dying.kill()
    assert await w.redis.llen(keys.ROUTINE_QUEUE) == 0  # taken off the queue

    b = w.proactive(clock, owner="b")
    await _looks(b, clock=clock)
    assert await b.scheduler.tick() == ["manual"]
    await b.scheduler.wait_idle()
    assert await b.scheduler.tick() == []
    assert texts_to(w, TG) == ["report"]
    runs = await b.store.runs("manual")
    assert [(x.trigger, x.outcome) for x in runs] == [("manual", "sent"), ("manual", RUN_AGAIN)]
    assert await _inflight(w) == {}
    await dying.bury()


async def test_an_event_run_keeps_its_trigger_message_when_run_again(pworld: Any) -> None:
    seen: list[str] = []

    def model(req: Any) -> Completion:
        seen.append(req.messages[-1].content)
        return Completion("alert")

    w = pworld(FnModel(model))
    await w.start()
    clock = FakeClock(start=1_767_225_600.0)
    a = w.proactive(clock, owner="a")
    r = validate(
        Routine(name="ev", trigger="event", pattern="down", prompt="x", notify="telegram:500")
    )
    assert await a.store.add(r)
    dying = Dying(a, "_light")
    await a.store.queue_run("ev", "event", text="web is down", who="Ann")
    assert await a.scheduler.tick() == ["ev"]
    await dying.kill()

    b = w.proactive(clock, owner="b")
    await _looks(b, clock=clock)
    assert await b.scheduler.tick() == ["ev"]
    await b.scheduler.wait_idle()
    assert texts_to(w, TG) == ["alert"]
    assert len(seen) == 1 and "> web is down" in seen[0]
    await dying.bury()


async def test_an_alive_leader_keeps_its_runs(pworld: Any) -> None:
    """A leader that lost the lease (stalled) but lives finishes its own runs: the
    next leader does not run them beside it."""
    w, clock = await _hourly(pworld)
    a = w.proactive(clock, owner="a")
    gate, _ = _hold_light(a)
    clock.advance(3600 + 1)
    assert await a.scheduler.tick() == ["hourly"]
    b = w.proactive(clock, owner="b")
    for _ in range(3):
        assert await b.scheduler.tick() == []  # a's alive key is there
        clock.advance(LEASE)
    gate.set()
    await a.scheduler.wait_idle()
    assert await b.scheduler.tick() == []
    assert texts_to(w, TG) == ["report"]
    assert [x.outcome for x in await b.store.runs("hourly")] == ["sent"]
    assert await _inflight(w) == {}


async def test_a_run_whose_process_dies_twice_is_given_up(pworld: Any) -> None:
    w, clock = await _hourly(pworld)
    await w.redis.set(keys.admin_thread(ADMIN), str(ADMIN_DM))
    first = await _hourly_fire_dies(w, clock)

    b = w.proactive(clock, owner="b")
    second = Dying(b, "_light")
    await _looks(b, clock=clock)
    assert await b.scheduler.tick() == ["hourly"]  # run again, and it kills b too
    await second.kill()

    c = w.proactive(clock, owner="c")
    await _looks(c, clock=clock)
    assert await c.scheduler.tick() == []  # given up
    assert await c.scheduler.tick() == []
    await c.scheduler.wait_idle()
    assert texts_to(w, TG) == []
    assert [x.outcome for x in await c.store.runs("hourly")] == [GIVEN_UP, RUN_AGAIN]
    assert await _inflight(w) == {}
    notices = texts_to(w, ADMIN_DM)
    assert len(notices) == 1 and "hourly" in notices[0] and "given up" in notices[0]
    # the next fire is a new run, with its own attempts
    clock.advance(3600)
    assert await c.scheduler.tick() == ["hourly"]
    await c.scheduler.wait_idle()
    assert texts_to(w, TG) == ["report"]
    await first.bury()
    await second.bury()


async def test_two_new_leaders_overlapping_run_a_dead_run_once(pworld: Any) -> None:
    w, clock = await _hourly(pworld)
    dying = await _hourly_fire_dies(w, clock)

    b, c = w.proactive(clock, owner="b"), w.proactive(clock, owner="c")
    await _looks(b, c, clock=clock)
    fired = await asyncio.gather(b.scheduler.tick(), c.scheduler.tick())
    await b.scheduler.wait_idle()
    await c.scheduler.wait_idle()
    assert sorted(fired) == [[], ["hourly"]]
    assert texts_to(w, TG) == ["report"]
    await dying.bury()


async def test_a_full_job_submitted_before_the_death_is_not_run_again(pworld: Any) -> None:
    """Its turn is in the inbound stream (which runs it once): nothing is left to run."""
    w, clock = await _world(
        pworld, name="job", trigger="manual", action="full", prompt="say report"
    )
    a = w.proactive(clock, owner="a")
    dying = Dying(a, "_submit", after=True)
    await a.store.queue_run("job")
    assert await a.scheduler.tick() == ["job"]
    await dying.kill()
    await w.settle(TG)

    b = w.proactive(clock, owner="b")
    await _looks(b, clock=clock)
    assert await b.scheduler.tick() == []
    await b.scheduler.wait_idle()
    await w.settle(TG)
    assert w.texts(TG) == ["report"]
    outcomes = [x.outcome for x in await b.store.runs("job")]
    assert len(outcomes) == 1 and outcomes[0].startswith("turn:"), outcomes
    assert await _inflight(w) == {}
    await dying.bury()


async def test_a_full_job_killed_before_its_submission_is_submitted_once(pworld: Any) -> None:
    """It took its slot, then died: the dead slot must not make the rerun 'already
    running'."""
    w, clock = await _world(
        pworld, name="job", trigger="manual", action="full", prompt="say report"
    )
    a = w.proactive(clock, owner="a")
    dying = Dying(a, "_submit")
    await a.store.queue_run("job")
    assert await a.scheduler.tick() == ["job"]
    await dying.kill()

    b = w.proactive(clock, owner="b")
    await _looks(b, clock=clock)
    assert await b.scheduler.tick() == ["job"]
    await b.scheduler.wait_idle()
    await w.settle(TG)
    assert w.texts(TG) == ["report"]
    outcomes = [x.outcome for x in await b.store.runs("job")]
    assert outcomes[-1] == RUN_AGAIN
    assert any(o.startswith("submitted to") for o in outcomes), outcomes
    assert await _inflight(w) == {}
    await dying.bury()


async def test_a_graceful_stop_leaves_nothing_in_flight(pworld: Any) -> None:
    """A stopping leader gives its cron fire back (as before): the next leader fires
    it by the schedule, not as a dead run as well."""
    w, clock = await _hourly(pworld)
    a = w.proactive(clock, owner="a")
    hung = Dying(a, "_light")
    clock.advance(3600 + 1)
    assert await a.scheduler.tick() == ["hourly"]
    await hung.hanging.wait()
    assert len(await _inflight(w)) == 1
    await a.scheduler._drain(grace=0.1)  # the stop: grace, then cancel
    assert await _inflight(w) == {}
    b = w.proactive(clock, owner="b")
    assert await b.scheduler.tick() == ["hourly"]
    await b.scheduler.wait_idle()
    assert await b.scheduler.tick() == []
    assert texts_to(w, TG) == ["report"]


async def test_a_leader_that_lost_the_lease_keeps_its_runs_while_it_lives(
    pworld: Any,
) -> None:
    """The real loops: "a" loses the lease while its run hangs (a stall), "b" leads
    for many times the alive key's TTL; a's living process renews that key, so b
    never runs a's run beside it."""
    w, clock = await _world(pworld, name="manual", trigger="manual")
    fast = {"scheduler_lease_secs": 0.3, "scheduler_tick_secs": 0.02}
    a = w.proactive(clock, owner="a", **fast)
    b = w.proactive(clock, owner="b", **fast)
    b.scheduler.elapsed = time.monotonic  # (the clock does not move: b's looks would not)
    gate, hanging = _hold_light(a)
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    ta = asyncio.create_task(a.scheduler.run(stop_a))
    while not a.scheduler.leader:
        await asyncio.sleep(0.01)
    tb = asyncio.create_task(b.scheduler.run(stop_b))
    await a.store.queue_run("manual")
    await hanging.wait()
    await w.redis.delete(keys.lease("scheduler"))  # a's lease is gone: b takes it
    while not b.scheduler.leader:
        await asyncio.sleep(0.01)
    ticks = b.scheduler.ticks
    while b.scheduler.ticks < ticks + 100:  # 2 s of b's ticks: ~7 TTLs of an alive key
        await asyncio.sleep(0.05)
    assert not a.scheduler.leader
    gate.set()
    await a.scheduler.wait_idle()
    stop_a.set()
    stop_b.set()
    await asyncio.wait_for(asyncio.gather(ta, tb), 10)
    assert texts_to(w, TG) == ["report"]
    assert [x.outcome for x in await b.store.runs("manual")] == ["sent"]
    assert await _inflight(w) == {}


# -- runs this process took that none of its tasks runs ----------------------------


class Blips:
    """``obj.attr`` (an async callable) raises a Redis connection error its next
    ``n`` calls, then works."""

    def __init__(self, obj: Any, attr: str, n: int = 1) -> None:
        self.left = n
        real: Callable[..., Any] = getattr(obj, attr)

        async def flaky(*a: Any, **k: Any) -> Any:
            if self.left:
                self.left -= 1
                raise RedisConnectionError("blip")
            return await real(*a, **k)

        setattr(obj, attr, flaky)


async def test_queued_runs_taken_then_hit_by_a_redis_blip_are_not_lost(pworld: Any) -> None:
    """QUEUE_TAKE took two runs (recorded in flight as the leader's); a Redis error
    before the first one's task started: the second still starts in that tick, the
    first in the next (its record is the leader's own, and no task runs it).  Before,
    the error ended the tick, and both records stayed, never looked at again by the
    living leader: both runs lost while it led."""
    w, clock = await _world(pworld, name="m1", trigger="manual")
    r2 = validate(Routine(name="m2", trigger="manual", prompt="x", notify="telegram:500"))
    assert await RoutineStore(w.redis).add(r2)
    a = w.proactive(clock, owner="a")
    blip = Blips(a.scheduler.store, "get")
    await a.store.queue_run("m1")
    await a.store.queue_run("m2")
    assert await a.scheduler.tick() == ["m2"]
    assert blip.left == 0 and await w.redis.llen(keys.ROUTINE_QUEUE) == 0
    await a.scheduler.wait_idle()
    assert await a.scheduler.tick() == ["m1"]  # taken, never started: started now
    await a.scheduler.wait_idle()
    assert await a.scheduler.tick() == []
    assert texts_to(w, TG) == ["report", "report"]
    assert [x.outcome for x in await a.store.runs("m1")] == ["sent"]
    assert await _inflight(w) == {}


async def test_a_finished_run_whose_record_was_not_removed_is_not_run_again(
    pworld: Any,
) -> None:
    """Removing the record failed (a Redis blip) after the run had ended: the leader
    removes it at its next tick.  Before, it stayed (the hash's TTL is refreshed by
    every write: it does not expire), under a living owner that skipped its own
    records; once that process was gone the next leader ran the finished run again:
    a second model call and a false 'its process died' record."""
    calls: list[str] = []

    def model(req: Any) -> Completion:
        calls.append("call")
        return Completion("report")

    w = pworld(FnModel(model), admin_ids=ADMIN)
    await w.start()
    clock = FakeClock(start=1_767_225_600.0)
    r = validate(Routine(name="manual", trigger="manual", prompt="x", notify="telegram:500"))
    assert await RoutineStore(w.redis).add(r)
    a = w.proactive(clock, owner="a")
    blip = Blips(a.scheduler, "_done")
    await a.store.queue_run("manual")
    assert await a.scheduler.tick() == ["manual"]
    await a.scheduler.wait_idle()
    assert blip.left == 0 and len(await _inflight(w)) == 1
    assert await a.scheduler.tick() == []  # removed now, not started again
    assert await _inflight(w) == {}
    await w.redis.delete(keys.routine_alive("a"))  # a stopped (a deploy): b leads
    b = w.proactive(clock, owner="b")
    await _looks(b, clock=clock)
    assert await b.scheduler.tick() == []
    await b.scheduler.wait_idle()
    assert texts_to(w, TG) == ["report"] and len(calls) == 1
    assert [x.outcome for x in await b.store.runs("manual")] == ["sent"]


async def test_an_ended_runs_record_is_removed_by_the_alive_keeper(pworld: Any) -> None:
    """A process that does not lead (no ticks) retries the removal with its alive
    key's renewal, and renews that key meanwhile: no leader takes the ended run for
    a dead one."""
    w, clock = await _world(pworld, name="manual", trigger="manual")
    a = w.proactive(clock, owner="a", scheduler_lease_secs=0.3)
    blip = Blips(a.scheduler, "_done", n=3)
    await a.store.queue_run("manual")
    assert await a.scheduler.tick() == ["manual"]
    await a.scheduler.wait_idle()
    assert len(await _inflight(w)) == 1
    keeper = asyncio.create_task(a.scheduler._keep_alive())  # as run() starts it
    try:
        for _ in range(200):  # (a bound, not a timing: each round is lease/15)
            if not await _inflight(w):
                break
            await asyncio.sleep(0.05)
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
    assert blip.left == 0 and await _inflight(w) == {}
    assert texts_to(w, TG) == ["report"]


async def test_a_rerun_whose_start_hit_a_redis_blip_is_started_by_its_new_owner(
    pworld: Any,
) -> None:
    """b took a dead run over (the record is b's now), then a Redis error before the
    rerun's task started: b starts it at its next tick.  Before, b skipped its own
    record: the run was lost, and a later leader gave it up (a false alert)."""
    w, clock = await _hourly(pworld)
    await w.redis.set(keys.admin_thread(ADMIN), str(ADMIN_DM))
    dying = await _hourly_fire_dies(w, clock)

    b = w.proactive(clock, owner="b")
    await _looks(b, clock=clock)
    Blips(b.scheduler.store, "get")
    with pytest.raises(RedisConnectionError):  # the loop logs it and ticks again
        await b.scheduler.tick()
    assert await b.scheduler.tick() == ["hourly"]
    await b.scheduler.wait_idle()
    assert await b.scheduler.tick() == []
    assert texts_to(w, TG) == ["report"]
    assert await _inflight(w) == {}
    c = w.proactive(clock, owner="c")  # later, another leader: nothing to give up
    await _looks(c, clock=clock)
    assert await c.scheduler.tick() == []
    assert GIVEN_UP not in [x.outcome for x in await c.store.runs("hourly")]
    assert texts_to(w, ADMIN_DM) == []
    await dying.bury()


async def test_a_dead_run_found_too_late_is_given_up_not_run(pworld: Any) -> None:
    """Found more than STALE_SECS after it was taken (every process down for hours,
    say), a dead run is recorded as given up, not run: its notification's 1-day
    dedup must not be outlived by a rerun, and a result that late is not wanted."""
    w, clock = await _world(pworld, name="manual", trigger="manual")
    a = w.proactive(clock, owner="a")
    dying = Dying(a, "_light")
    await a.store.queue_run("manual")
    assert await a.scheduler.tick() == ["manual"]
    await dying.kill()
    clock.advance(STALE_SECS + 60)

    b = w.proactive(clock, owner="b")
    await _looks(b, clock=clock)
    assert await b.scheduler.tick() == []
    await b.scheduler.wait_idle()
    assert texts_to(w, TG) == []
    assert [x.outcome for x in await b.store.runs("manual")] == [TOO_LATE]
    assert await _inflight(w) == {}
    await dying.bury()


# -- a living owner whose alive key lapsed -------------------------------------------


class Outage:
    """The scheduler's Redis client, unreachable (for SET: the alive key's renewal)
    while ``down``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.down = False
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != "set":
            return attr

        async def set_(*a: Any, **k: Any) -> Any:
            if self.down:
                self.failed += 1
                raise RedisConnectionError("Redis unreachable")
            return await attr(*a, **k)

        return set_


async def test_a_living_process_keeps_its_run_after_a_redis_outage_longer_than_a_lease(
    pworld: Any,
) -> None:
    """Redis unreachable for longer than a lease: a's alive key expires with its run
    in flight.  The new leader's first look after Redis is back finds it missing,
    but takes nothing over until a second look lease/2 later; by then a's keeper
    (retrying every lease/15 after a failure) has renewed it.  Before, that first
    look took the run over: it ran in both processes."""
    calls: list[str] = []
    w = pworld(FnModel(lambda req: (calls.append("x"), Completion("report"))[1]))
    await w.start()
    clock = FakeClock(start=1_767_225_600.0)
    r = validate(Routine(name="manual", trigger="manual", prompt="x", notify="telegram:500"))
    assert await RoutineStore(w.redis).add(r)
    a = w.proactive(clock, owner="a", scheduler_lease_secs=0.6)
    outage = Outage(w.redis)
    a.scheduler.redis = outage  # type: ignore[assignment]  (the keeper's client)
    gate, hanging = _hold_light(a)  # a long model call (it does not need Redis)
    keeper = asyncio.create_task(a.scheduler._keep_alive())  # as run() starts it
    try:
        await a.store.queue_run("manual")
        assert await a.scheduler.tick() == ["manual"]
        await hanging.wait()
        outage.down = True  # Redis unreachable: a cannot renew; its key expires
        for _ in range(200):  # (a bound: a tries every lease/3)
            if outage.failed:
                break
            await asyncio.sleep(0.02)
        assert outage.failed
        await w.redis.delete(keys.routine_alive("a"))
        outage.down = False  # Redis is back
        b = w.proactive(clock, owner="b")
        assert await b.scheduler.tick() == []  # the first look after the outage
        for _ in range(200):  # (a bound, not a timing: a renews within lease/15)
            if await w.redis.exists(keys.routine_alive("a")):
                break
            await asyncio.sleep(0.02)
        clock.advance(LEASE / 2)
        assert await b.scheduler.tick() == []  # a renewed: it keeps its run
        gate.set()
        await a.scheduler.wait_idle()
        await b.scheduler.wait_idle()
        assert await b.scheduler.tick() == []
    finally:
        gate.set()
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
    assert len(calls) == 1 and texts_to(w, TG) == ["report"]
    assert [x.outcome for x in await b.store.runs("manual")] == ["sent"]
    assert await _inflight(w) == {}


async def _living(pworld: Any) -> tuple[Any, FakeClock, Any, asyncio.Event]:
    """A living owner "a" with a queued run in flight (its model call waits for the
    returned gate); its alive key is set and removed by hand (no keeper runs)."""
    w, clock = await _world(pworld, name="manual", trigger="manual")
    a = w.proactive(clock, owner="a")
    gate, hanging = _hold_light(a)  # a long model call: a is alive and running it
    await a.store.queue_run("manual")
    assert await a.scheduler.tick() == ["manual"]
    await hanging.wait()
    return w, clock, a, gate


async def _run_once_more(w: Any, a: Any, b: Any, gate: asyncio.Event) -> None:
    """a's run ends; it ran once, in a alone."""
    gate.set()
    await a.scheduler.wait_idle()
    await b.scheduler.wait_idle()
    assert texts_to(w, TG) == ["report"]
    assert [x.outcome for x in await b.store.runs("manual")] == ["sent"]
    assert await _inflight(w) == {}


async def test_a_sighting_before_a_gap_in_the_looks_does_not_count(pworld: Any) -> None:
    """b saw a's alive key missing once (a blip), then looked no more for an hour
    (it lost the lease, or its ticks failed); a renewed meanwhile.  a's key lapses
    again briefly: b's first look at this lapse is a first sighting, not the second
    look lease/2 after the old one.  Before, that old sighting counted: the run was
    taken over at a single look while a still ran it, and ran twice."""
    w, clock, a, gate = await _living(pworld)
    b = w.proactive(clock, owner="b")
    try:
        await w.redis.delete(keys.routine_alive("a"))  # a blip
        assert await b.scheduler.tick() == []
        await w.redis.set(keys.routine_alive("a"), b"1", px=int(LEASE * 1000))  # renewed
        clock.advance(3600)  # b does not look meanwhile
        await w.redis.delete(keys.routine_alive("a"))  # another blip
        assert await b.scheduler.tick() == []  # b's first look at it
    finally:
        await _run_once_more(w, a, b, gate)


async def test_a_sighting_before_the_lease_or_a_failed_tick_does_not_count(
    pworld: Any,
) -> None:
    """b's lead (its real loop, its ticks scripted) starts over what it saw missing:
    a sighting from before it took the lease, and one from before a tick failed on
    Redis (it looked at nothing meanwhile), are not the first of two looks.  Each
    time the next sighting, lease/2 later (within the gap that starts the count over
    by itself), is a first one, and a, which lives, keeps its run."""
    w, clock, a, gate = await _living(pworld)
    b = w.proactive(clock, owner="b", scheduler_tick_secs=0.01)
    real_tick = b.scheduler.tick

    async def lead(*script: Callable[[], Any]) -> list[Any]:
        """One lead of b's, its ticks ``script``; what each tick that ended returned."""
        steps, got, stop = list(script), [], asyncio.Event()

        async def tick() -> Any:
            step = steps.pop(0)
            if not steps:
                stop.set()
            got.append(await step())
            return got[-1]

        b.scheduler.tick = tick  # type: ignore[method-assign]
        try:
            await asyncio.wait_for(b.scheduler._lead(stop), 30)
        finally:
            b.scheduler.tick = real_tick  # type: ignore[method-assign]
        return got

    async def down() -> list[str]:
        raise RedisConnectionError("Redis unreachable")

    async def look_then_wait() -> list[str]:
        started = await real_tick()
        clock.advance(LEASE / 2)
        return started

    try:
        await w.redis.delete(keys.routine_alive("a"))  # a's key lapses (a blip)
        assert await look_then_wait() == []  # seen missing before b leads
        assert await lead(real_tick) == [[]]  # the lead starts: forgotten
        # within a lead: a sighting, a tick failed on Redis, the next look
        assert await lead(look_then_wait, down, real_tick) == [[], []]
    finally:
        await _run_once_more(w, a, b, gate)
