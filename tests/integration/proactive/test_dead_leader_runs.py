"""A leader that dies without stopping (SIGKILL, out of memory) while a routine run
is in flight: the next leader runs it again, once; a second death gives it up.

A death is simulated by leaving the leader's runs hanging forever, never cancelled
(so none of the graceful stop's give-back runs), and its alive key gone (as it is
a lease after the process's last renewal).  The hanging tasks are cancelled only
after the assertions, to end the test cleanly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.proactive.routines import Routine, RoutineStore, validate
from agent_core.proactive.scheduler import GIVEN_UP, RUN_AGAIN
from agent_core.store import keys
from tests.fakes.llm_servers import FakeClock
from tests.integration.agent.conftest import FnModel
from tests.integration.proactive.test_scheduler import TG, texts_to

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


async def test_a_cron_fire_in_flight_on_a_killed_leader_runs_once_on_the_next(
    pworld: Any,
) -> None:
    w, clock = await _hourly(pworld)
    a = w.proactive(clock, owner="a")
    dying = Dying(a, "_light")
    clock.advance(3600 + 1)
    assert await a.scheduler.tick() == ["hourly"]
    await dying.kill()  # last fire and claim written, the run never ends

    b = w.proactive(clock, owner="b")  # takes the lease
    clock.advance(30)
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
    gate = asyncio.Event()
    real = a.runner._light

    async def slow(*args: Any, **kw: Any) -> str:
        await gate.wait()
        return await real(*args, **kw)

    a.runner._light = slow  # type: ignore[method-assign]
    clock.advance(3600 + 1)
    assert await a.scheduler.tick() == ["hourly"]
    b = w.proactive(clock, owner="b")
    for _ in range(3):
        assert await b.scheduler.tick() == []  # a's alive key is there
    gate.set()
    await a.scheduler.wait_idle()
    assert await b.scheduler.tick() == []
    assert texts_to(w, TG) == ["report"]
    assert [x.outcome for x in await b.store.runs("hourly")] == ["sent"]
    assert await _inflight(w) == {}


async def test_a_run_whose_process_dies_twice_is_given_up(pworld: Any) -> None:
    w, clock = await _hourly(pworld)
    await w.redis.set(keys.admin_thread(ADMIN), str(ADMIN_DM))
    a = w.proactive(clock, owner="a")
    first = Dying(a, "_light")
    clock.advance(3600 + 1)
    assert await a.scheduler.tick() == ["hourly"]
    await first.kill()

    b = w.proactive(clock, owner="b")
    second = Dying(b, "_light")
    assert await b.scheduler.tick() == ["hourly"]  # run again, and it kills b too
    await second.kill()

    c = w.proactive(clock, owner="c")
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
    a = w.proactive(clock, owner="a")
    dying = Dying(a, "_light")
    clock.advance(3600 + 1)
    assert await a.scheduler.tick() == ["hourly"]
    await dying.kill()

    b, c = w.proactive(clock, owner="b"), w.proactive(clock, owner="c")
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
    gate, hanging = asyncio.Event(), asyncio.Event()
    real = a.runner._light

    async def slow(*args: Any, **kw: Any) -> str:
        hanging.set()
        await gate.wait()
        return await real(*args, **kw)

    a.runner._light = slow  # type: ignore[method-assign]
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
