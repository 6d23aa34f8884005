"""Routines that fail: a window too small for Redis, a full job that cannot be
submitted, a target chat that is gone, a cron fire cut off by a stopping worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_core.errors import SendFailed
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.proactive.routines import Routine, RoutineError, RoutineStore, parse_add, validate
from agent_core.proactive.runner import EventTriggers
from agent_core.store import keys
from tests.fakes.llm_servers import FakeClock
from tests.integration.agent.conftest import FnModel, user_event
from tests.integration.proactive.test_scheduler import TG, texts_to


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


async def test_a_fire_run_again_while_its_turn_is_in_flight_leaves_that_slot_alone(
    pworld: Any,
) -> None:
    """A full fire cut off at shutdown runs again after the restart (the scheduler
    rolls it back).  If its first submission got in, that turn is still in flight and
    holds the slot under the same fire id: the rerun took it "again", was refused as a
    duplicate, and freed it, so a third run could start beside the two."""
    w = pworld(FnModel(lambda req: Completion("echo")))
    await w.start()
    p = w.proactive()
    r = validate(
        Routine(
            name="full2",
            trigger="manual",
            action="full",
            prompt="x",
            notify="telegram:500",
            max_concurrent=2,
        )
    )
    assert await p.store.add(r)
    assert await p.runner.take_slot(r, "due-1") == 1  # the first run's turn, in flight
    assert await p.runner.run(r, "cron", "due-1") == "skipped: this fire is already running"
    assert await w.redis.zscore(keys.routine_running("full2"), "due-1") is not None


# --- a target chat that is gone ---------------------------------------------------
async def test_a_routine_whose_chat_is_gone_is_paused_after_three_failed_sends(
    pworld: Any,
) -> None:
    """The bot was removed from chat 500: every send fails for good.  The routine kept
    firing (and paying for a model call) forever; now the third failure in a row pauses
    it, says why in its outcome and tells the admins."""
    calls: list[int] = []

    def rule(req: Any) -> Completion:
        calls.append(1)
        return Completion("something to say")

    w = pworld(FnModel(rule), admin_ids="telegram:admin")
    await w.start()
    admin_dm = "telegram:bot1:admin-dm:"
    await w.redis.set(keys.admin_thread("telegram:admin"), admin_dm)
    p = w.proactive()
    real_send = w.outbox.send

    async def send(thread: ThreadKey, msg: Any) -> Any:
        if thread.conversation == "500":
            raise SendFailed("the bot cannot write to chat 500 (removed from the group)")
        return await real_send(thread, msg)

    w.outbox.send = send  # type: ignore[method-assign]
    r = validate(Routine(name="l1", trigger="manual", prompt="x", notify="telegram:500"))
    assert await p.store.add(r)
    for _ in range(3):
        await p.store.queue_run("l1")
        await p.scheduler.tick()
        await p.scheduler.wait_idle()
    outcomes = [x.outcome for x in await p.store.runs("l1")][::-1]
    assert len(outcomes) == 3 and len(calls) == 3
    assert all(o.startswith("error: SendFailed") for o in outcomes)
    assert outcomes[-1].endswith("paused after 3 failed sends in a row"), outcomes
    assert "paused" not in outcomes[1]
    stored = await p.store.get("l1")
    assert stored is not None and not stored.enabled
    notices = [s.message.text for s in w.outbox.sends(admin_dm)]
    assert len(notices) == 1 and "Routine l1 is paused" in notices[0], notices
    # resumed (target fixed): the count starts again
    await p.store.set_enabled("l1", True)
    assert (await p.store.state("l1")).runs == 3
    assert not await w.redis.hexists(keys.routine_state("l1"), "send_failures")


async def test_a_send_that_works_resets_the_failure_count(pworld: Any) -> None:
    w = pworld(FnModel(lambda req: Completion("hello")))
    await w.start()
    p = w.proactive()
    fail = [True, True, False, True, True]
    real_send = w.outbox.send

    async def send(thread: ThreadKey, msg: Any) -> Any:
        if fail.pop(0):
            raise SendFailed("refused")
        return await real_send(thread, msg)

    w.outbox.send = send  # type: ignore[method-assign]
    r = validate(Routine(name="l2", trigger="manual", prompt="x", notify="telegram:500"))
    assert await p.store.add(r)
    for i in range(5):
        await p.runner.run(r, "manual", f"f{i}")
    stored = await p.store.get("l2")
    assert stored is not None and stored.enabled  # never 3 in a row


# --- a cron fire cut off by a stopping worker -------------------------------------
async def _hourly_on(pworld: Any) -> tuple[Any, FakeClock, Any]:
    """A world whose leader "a" has an hourly routine, on a clock at 2026-01-01 00:00."""
    w = pworld(FnModel(lambda req: Completion("report")))
    await w.start()
    clock = FakeClock(start=1_767_225_600.0)
    p = w.proactive(clock, owner="a")
    r = validate(
        Routine(
            name="hourly",
            trigger="cron",
            cron="0 * * * *",
            prompt="x",
            notify="telegram:500",
            created_at=clock(),
        )
    )
    assert await p.store.add(r)
    return w, clock, p


async def test_a_cron_fire_cut_off_at_shutdown_is_recorded_and_runs_after_restart(
    pworld: Any,
) -> None:
    """A deploy stops the leader while its hourly fire waits on the model: the drain's
    grace ends, the run is cancelled.  Its last fire and claim were already written, so
    the fire was lost with no record.  Now it is recorded as interrupted and the next
    leader runs that due time once (and only once)."""
    w, clock, p = await _hourly_on(pworld)
    gate = asyncio.Event()  # never set: the model call hangs
    real_light = p.runner._light

    async def slow_light(*a: Any, **k: Any) -> str:
        await gate.wait()
        return await real_light(*a, **k)

    p.runner._light = slow_light  # type: ignore[method-assign]
    clock.advance(3600 + 1)
    assert await p.scheduler.tick() == ["hourly"]
    await asyncio.sleep(0.05)
    await p.scheduler._drain(grace=0.1)  # the worker stops: grace, then cancel
    runs = await p.store.runs("hourly")
    assert [x.outcome for x in runs] == [
        "interrupted: the worker stopped; this fire runs again after the restart"
    ]
    assert await w.redis.zcard(keys.routine_running("hourly")) == 0

    q = w.proactive(clock, owner="b")  # the next leader
    clock.advance(60)
    assert await q.scheduler.tick() == ["hourly"]
    await q.scheduler.wait_idle()
    assert await q.scheduler.tick() == []  # once, not again
    assert (await q.store.runs("hourly"))[0].outcome == "sent"
    assert texts_to(w, TG) == ["report"]
    # the rerun was claimed for that due time like any fire
    assert await w.redis.get(keys.routine_fire("hourly", 1_767_229_200)) == b"b"


async def test_a_cut_off_fire_never_undoes_a_later_leaders_fire(pworld: Any) -> None:
    """The give-back is compare-and-set: if another leader fired the routine after
    this one (a takeover while the cut-off run still hung), its last fire and its
    claim stay as that leader wrote them."""
    w, clock, p = await _hourly_on(pworld)
    gate = asyncio.Event()

    async def hung(*a: Any, **k: Any) -> str:
        await gate.wait()
        return "never"

    p.runner._light = hung  # type: ignore[method-assign]
    clock.advance(3600 + 1)
    assert await p.scheduler.tick() == ["hourly"]
    await asyncio.sleep(0.05)
    # meanwhile a later leader fired it (its own last fire, its own claim)
    later = repr(clock() + 5)
    await w.redis.hset(keys.routine_state("hourly"), "last_fire", later)
    claim = keys.routine_fire("hourly", 1_767_229_200)
    await w.redis.set(claim, "b")
    await p.scheduler._drain(grace=0.1)  # this leader's run is cut off
    assert await w.redis.hget(keys.routine_state("hourly"), "last_fire") == later.encode()
    assert await w.redis.get(claim) == b"b"


# --- a tick cancelled 2 s after stop (Redis slow) ----------------------------------
async def _cancel_tick_inside(p: Any, obj: Any, attr: str) -> None:
    """Tick, and cancel the tick once ``obj.attr`` has done its work in Redis but
    before it returns (what cancelling a tick waiting on a slow Redis can hit)."""
    real = getattr(obj, attr)
    done, go_on = asyncio.Event(), asyncio.Event()

    async def held(*a: Any, **k: Any) -> Any:
        out = await real(*a, **k)
        done.set()
        await go_on.wait()
        return out

    setattr(obj, attr, held)
    try:
        tick = asyncio.create_task(p.scheduler.tick())
        await done.wait()
        tick.cancel()
        await asyncio.gather(tick, return_exceptions=True)
        assert tick.cancelled()
        go_on.set()
        await p.scheduler._drain(grace=10.0)  # the stop goes on
    finally:
        setattr(obj, attr, real)


async def test_a_tick_cancelled_after_popping_queued_runs_still_runs_them(
    pworld: Any,
) -> None:
    """A cancel between the LPOP of the queue and starting the runs lost them."""
    w = pworld(FnModel(lambda req: Completion("done")))
    await w.start()
    p = w.proactive(FakeClock(start=1_767_225_600.0), owner="a")
    r = Routine(name="manual", trigger="manual", prompt="x", notify="telegram:500")
    assert await p.store.add(validate(r))
    await p.store.queue_run("manual")
    await _cancel_tick_inside(p, p.scheduler, "_take")  # the script that pops them
    assert [x.trigger for x in await p.store.runs("manual")] == ["manual"]
    assert texts_to(w, TG) == ["done"]


async def test_a_tick_cancelled_after_writing_a_fire_still_runs_it(pworld: Any) -> None:
    """A cancel between writing the last fire (or the claim) and starting the run
    skipped that fire with nothing given back."""
    w, clock, p = await _hourly_on(pworld)
    clock.advance(3600 + 1)
    await _cancel_tick_inside(p, p.scheduler, "_claim")  # writes the last fire and claim
    assert [x.outcome for x in await p.store.runs("hourly")] == ["sent"]
    assert texts_to(w, TG) == ["report"]
