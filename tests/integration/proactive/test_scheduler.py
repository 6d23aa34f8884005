"""Routines and the heartbeat through real workers on a real Valkey, with a fake clock."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest
from agent_core.proactive.routines import Routine, RoutineStore, validate
from agent_core.store import keys
from tests.fakes.llm_servers import FakeClock
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

TG = ThreadKey("telegram", "bot1", "500")  # the notify target's thread (telegram:500)
HOUR = 3600.0


def texts_to(w: Any, thread: ThreadKey) -> list[str]:
    return [s.message.text for s in w.outbox.sends(str(thread))]


def answer(text_for: Any) -> FnModel:
    def rule(req: CompletionRequest) -> Completion:
        return Completion(text_for(req))

    return FnModel(rule)


async def add(store: RoutineStore, **kw: Any) -> Routine:
    kw.setdefault("notify", "telegram:500")
    r = validate(Routine(**kw))
    assert await store.add(r)
    return r


async def test_missed_cron_schedule_runs_once_after_downtime(pworld: Any) -> None:
    w = pworld(answer(lambda req: "Reminder: standup"))
    await w.start()
    clock = FakeClock(start=1_767_225_600.0)  # 2026-01-01 00:00 UTC
    p = w.proactive(clock)
    await add(
        p.store,
        name="hourly",
        trigger="cron",
        cron="0 * * * *",
        prompt="remind",
        created_at=clock(),
    )

    assert await p.scheduler.tick() == []  # not due yet
    clock.advance(HOUR + 1)
    assert await p.scheduler.tick() == ["hourly"]
    await p.scheduler.wait_idle()
    assert texts_to(w, TG) == ["Reminder: standup"]
    assert await p.scheduler.tick() == []  # fired for this hour already

    clock.advance(5 * HOUR)  # "downtime": five scheduled fires missed
    assert await p.scheduler.tick() == ["hourly"]  # ... run once
    await p.scheduler.wait_idle()
    for _ in range(3):
        assert await p.scheduler.tick() == []
    assert len(texts_to(w, TG)) == 2
    clock.advance(HOUR)  # and the schedule goes on from there
    assert await p.scheduler.tick() == ["hourly"]
    await p.scheduler.wait_idle()
    st = await p.store.state("hourly")
    assert st.runs == 3 and st.outcome == "sent" and st.duration >= 0
    runs = await p.store.runs("hourly")
    assert [r.trigger for r in runs] == ["cron"] * 3


async def test_routine_ok_stays_silent_and_manual_runs_are_queued(pworld: Any) -> None:
    w = pworld(answer(lambda req: "ROUTINE_OK"))
    await w.start()
    p = w.proactive()
    await add(p.store, name="quiet", trigger="manual", prompt="check")
    await p.store.queue_run("quiet")
    assert await p.scheduler.tick() == ["quiet"]
    await p.scheduler.wait_idle()
    assert texts_to(w, TG) == []
    assert (await p.store.state("quiet")).outcome == "ok (silent)"


async def test_a_second_process_takes_over_when_the_leader_dies(pworld: Any) -> None:
    w = pworld(answer(lambda req: "tick"))
    await w.start()
    a = w.proactive(owner="proc-a", scheduler_lease_secs=0.6, scheduler_tick_secs=0.05)
    b = w.proactive(owner="proc-b", scheduler_lease_secs=0.6, scheduler_tick_secs=0.05)
    a.scheduler.clock = b.scheduler.clock = time.time
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    ta = asyncio.create_task(a.scheduler.run(stop_a))
    await asyncio.sleep(0.2)
    tb = asyncio.create_task(b.scheduler.run(stop_b))
    await asyncio.sleep(0.5)
    assert a.scheduler.leader and not b.scheduler.leader
    ticks_b = b.scheduler.ticks
    assert ticks_b == 0  # only the leader ticks

    # the leader dies: no release, no more renewals (SIGKILL)
    async def no_release() -> None:
        return None

    a.scheduler.lease.release = no_release  # type: ignore[method-assign]
    if a.scheduler.lease._task is not None:
        a.scheduler.lease._task.cancel()
    ta.cancel()
    died = time.monotonic()
    while not b.scheduler.leader and time.monotonic() - died < 3:
        await asyncio.sleep(0.02)
    took = time.monotonic() - died
    assert b.scheduler.leader, "nobody took over"
    assert took < 0.6 + 0.3, f"takeover took {took:.2f} s"
    await asyncio.sleep(0.2)
    assert b.scheduler.ticks > 0
    stop_b.set()
    await asyncio.wait_for(tb, 5)
    assert await w.redis.get(keys.lease("scheduler")) is None  # released on stop


async def test_two_leaders_for_a_moment_fire_a_due_time_once(pworld: Any) -> None:
    w = pworld(answer(lambda req: "once"))
    await w.start()
    clock = FakeClock(start=1_767_225_600.0)
    a, b = w.proactive(clock, owner="a"), w.proactive(clock, owner="b")
    await add(
        a.store, name="daily", trigger="cron", cron="0 0 * * *", prompt="x", created_at=clock() - 10
    )
    clock.advance(86_400)
    # b read the state before a recorded the fire (a stalled old leader and its successor)
    fired = await asyncio.gather(a.scheduler.tick(), b.scheduler.tick())
    await a.scheduler.wait_idle()
    await b.scheduler.wait_idle()
    assert sum(len(f) for f in fired) == 1
    assert texts_to(w, TG) == ["once"]


async def test_event_trigger_cooldown_dedup_and_concurrency(pworld: Any) -> None:
    gate = asyncio.Event()

    class Slow(FnModel):
        async def complete(self, request: CompletionRequest) -> Completion:
            if "routine" in request.messages[0].content:
                await gate.wait()
                return Completion("Alert: " + request.messages[-1].content.splitlines()[-1])
            return await super().complete(request)

    w = pworld(Slow(lambda req: Completion("echo")))
    from agent_core.proactive.routines import RoutineStore as Store
    from agent_core.proactive.runner import EventTriggers

    triggers = EventTriggers(w.redis, Store(w.redis), refresh_secs=0)
    w.ingest.add_filter(triggers)
    await w.start()
    p = w.proactive()
    await add(
        p.store,
        name="outage",
        trigger="event",
        pattern=r"\bdown\b",
        prompt="summarise",
        cooldown_secs=0.4,
    )
    chat = ThreadKey("telegram", "bot1", "77")
    await w.send(user_event(chat, "the site is down"))
    await w.send(user_event(chat, "still down!"))  # within the cooldown
    await w.send(user_event(chat, "all good here"))  # does not match
    assert await w.redis.llen(keys.ROUTINE_QUEUE) == 1
    await asyncio.sleep(0.45)  # cooldown over
    await w.send(user_event(chat, "down again"))
    assert await w.redis.llen(keys.ROUTINE_QUEUE) == 2

    # two runs queued, max 1 in flight: the second is skipped while the first runs
    assert await p.scheduler.tick() == ["outage", "outage"]
    await asyncio.sleep(0.2)
    gate.set()
    await p.scheduler.wait_idle()
    runs = await p.store.runs("outage")
    outcomes = sorted(r.outcome for r in runs)
    assert outcomes == ["sent", "skipped: 1 run(s) already in flight"], outcomes
    assert texts_to(w, TG) == ["Alert: > the site is down"]  # quoted as data (from U1)
    # the slot is free again afterwards
    assert await w.redis.zcard(keys.routine_running("outage")) == 0

    # dedup window: the same text twice triggers once even without a cooldown
    await add(
        p.store,
        name="dup",
        trigger="event",
        pattern="deploy",
        prompt="x",
        cooldown_secs=0,
        dedup_secs=60,
    )
    before = await w.redis.llen(keys.ROUTINE_QUEUE)
    await w.send(user_event(chat, "Deploy finished"))
    await w.send(user_event(chat, "deploy finished"))
    await w.send(user_event(chat, "deploy failed"))
    assert await w.redis.llen(keys.ROUTINE_QUEUE) - before == 2


async def test_heartbeat_ok_sends_nothing_attention_is_sent(pworld: Any, tmp_path: Any) -> None:
    replies = ["HEARTBEAT_OK", "The disk is 95% full.", "HEARTBEAT_OK"]
    model = answer(lambda req: replies.pop(0))
    w = pworld(model)
    await w.start()
    clock = FakeClock()
    hb_file = tmp_path / "HEARTBEAT.md"
    p = w.proactive(
        clock,
        heartbeat_enabled=True,
        heartbeat_interval_secs=1800,
        heartbeat_notify="telegram:500",
        heartbeat_file=hb_file,
    )
    assert p.heartbeat is not None
    # an empty checklist (no file, nothing set) skips the tick: no model call
    assert await p.heartbeat.tick() == "skipped (empty checklist)"
    assert model.requests == []
    hb_file.write_text("- is the disk full?\n")
    # the first tick waits one interval
    assert await p.scheduler.tick() == []
    clock.advance(1799)
    assert await p.scheduler.tick() == []
    clock.advance(2)
    assert await p.scheduler.tick() == ["heartbeat"]
    await p.scheduler.wait_idle()
    assert "is the disk full" in model.requests[-1].messages[-1].content
    assert texts_to(w, TG) == []  # HEARTBEAT_OK: nothing sent
    clock.advance(1801)
    assert await p.scheduler.tick() == ["heartbeat"]
    await p.scheduler.wait_idle()
    assert texts_to(w, TG) == ["The disk is 95% full."]
    # a checklist set from chat wins over the file
    await w.redis.set(keys.HEARTBEAT_CHECKLIST, "- anything from chat?")
    assert await p.heartbeat.tick() == "ok"
    assert "anything from chat" in model.requests[-1].messages[-1].content


async def test_heartbeat_failures_are_counted_and_the_loop_goes_on(
    pworld: Any, caplog: Any
) -> None:
    class Down(FnModel):
        async def complete(self, request: CompletionRequest) -> Completion:
            raise RuntimeError("model down")

    w = pworld(Down(lambda r: Completion("")))
    await w.start()
    p = w.proactive(
        heartbeat_enabled=True, heartbeat_notify="telegram:500", heartbeat_max_failures=3
    )
    assert p.heartbeat is not None
    await w.redis.set(keys.HEARTBEAT_CHECKLIST, "- check")
    outs = [await p.heartbeat.tick() for _ in range(4)]
    assert all(o.startswith("error: RuntimeError") for o in outs)
    st = await p.heartbeat.status()
    assert st["failures"] == "4"
    assert any("failed 3 times in a row" in r.getMessage() for r in caplog.records)


async def test_full_job_routine_asks_for_approval_in_the_target_chat(pworld: Any) -> None:
    model = FnModel(
        tools_then_answer(("[routine counting] count it", [call("counter", label="x")]))
    )
    w = pworld(model, admin_ids="telegram:900")
    await w.start()
    p = w.proactive()
    await add(
        p.store,
        name="counting",
        trigger="manual",
        action="full",
        prompt="count it",
        created_by="telegram:900",
    )
    await p.store.queue_run("counting")
    assert await p.scheduler.tick() == ["counting"]
    await p.scheduler.wait_idle()
    await w.settle(TG)
    prompts = w.prompts(TG)
    assert len(prompts) == 1, w.outbox.log
    # no "Always": no one's Always covers a routine's job (docs/agent.md)
    assert [b.label for b in prompts[0].message.buttons] == ["Approve", "Deny"]
    assert await w.counter() == 0
    aid = prompts[0].message.buttons[0].payload.split(":")[1]
    # the routine's creator (an admin, on that channel) presses Approve in that chat
    from agent_core.events import EventKind

    await w.send(user_event(TG, "", "900", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await w.settle(TG)
    assert await w.counter() == 1
    assert w.texts(TG)[-1] == "done: counted x -> 1"
    runs = await p.store.runs("counting")
    outcomes = [r.outcome for r in runs]
    assert "turn: need-approval" in outcomes
    assert any(o.startswith("submitted to telegram:bot1:500") for o in outcomes)
    # a rerun of the same fire never submits twice (ingest dedup on the event id)
    assert await w.redis.zcard(keys.routine_running("counting")) == 0


async def test_routine_commands_from_chat_are_for_admins(pworld: Any) -> None:
    w = pworld(answer(lambda req: "x"), admin_ids="telegram:900")
    await w.start()
    admin = ThreadKey("telegram", "bot1", "900")
    await w.send(
        user_event(admin, "/routine add r1 --cron '0 9 * * *' --notify telegram:500 hi", "1")
    )
    await w.settle(admin)
    assert "Only an admin" in w.texts(admin)[-1]
    await w.send(
        user_event(admin, "/routine add r1 --cron '0 99 * * *' --notify telegram:500 hi", "900")
    )
    await w.settle(admin)
    assert "Not added: bad cron expression" in w.texts(admin)[-1]
    await w.send(user_event(admin, "/routine add r1 --event '(x' --notify telegram:500 hi", "900"))
    await w.settle(admin)
    assert "bad regular expression" in w.texts(admin)[-1]
    await w.send(
        user_event(
            admin,
            "/routine add r1 --cron '0 9 * * *' --tz Europe/Paris --notify telegram:500 hi",
            "900",
        )
    )
    await w.settle(admin)
    assert "Added routine `r1`" in w.texts(admin)[-1]
    await w.send(user_event(admin, "/routine pause r1", "900"))
    await w.settle(admin)
    await w.send(user_event(admin, "/routine show r1", "900"))
    await w.settle(admin)
    shown = w.texts(admin)[-1]
    assert "(paused)" in shown and "0 9 * * *" in shown and "Europe/Paris" in shown
    await w.send(user_event(admin, "/heartbeat set - is the backup fresh?", "900"))
    await w.settle(admin)
    assert await w.redis.get(keys.HEARTBEAT_CHECKLIST) == b"- is the backup fresh?"
    await w.send(user_event(admin, "/routine remove r1", "900"))
    await w.settle(admin)
    assert await RoutineStore(w.redis).get("r1") is None


async def test_two_leaders_overlapping_run_one_heartbeat_check(pworld: Any, tmp_path: Any) -> None:
    """Heartbeat.due is claimed in Redis: two schedulers that both see the check due
    (a lease changing hands) run it once."""
    w = pworld(answer(lambda req: "HEARTBEAT_OK"))
    await w.start()
    clock = FakeClock()
    hb_file = tmp_path / "HEARTBEAT.md"
    hb_file.write_text("- check\n")
    settings = dict(heartbeat_enabled=True, heartbeat_interval_secs=60, heartbeat_file=hb_file)
    a, b = w.proactive(clock, **settings), w.proactive(clock, **settings)
    assert a.heartbeat is not None and b.heartbeat is not None
    assert not await a.heartbeat.due(clock())  # the first check waits one interval
    clock.advance(61)
    real, read, gate = w.redis, [], asyncio.Event()

    class BothReadFirst:  # each check reads the last tick before either writes it
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        async def hget(self, *args: Any) -> Any:
            value = await real.hget(*args)
            read.append(value)
            if len(read) == 2:
                gate.set()
            await gate.wait()
            return value

    a.heartbeat.redis = b.heartbeat.redis = BothReadFirst()  # type: ignore[assignment]
    both = await asyncio.gather(a.heartbeat.due(clock()), b.heartbeat.due(clock()))
    assert sorted(both) == [False, True]


async def test_a_light_routines_message_is_in_the_history_a_reply_sees(pworld: Any) -> None:
    """Someone answering a routine's message ("what do you mean?") is answered with
    that message in the conversation, as Parley's own words (folded into the user's
    message when it starts the conversation); it is not re-answered."""

    def rule(req: CompletionRequest) -> str:
        if req.messages[-1].content == "check the disks":  # the routine's call
            return "Disk is 91 % full on db-1."
        return "ok"

    model = answer(rule)
    w = pworld(model)
    await w.start()
    p = w.proactive()
    await add(p.store, name="disk", trigger="manual", prompt="check the disks")
    await p.store.queue_run("disk")
    assert await p.scheduler.tick() == ["disk"]
    await p.scheduler.wait_idle()
    assert texts_to(w, TG) == ["Disk is 91 % full on db-1."]
    await w.send(user_event(TG, "what do you mean?"))
    await w.settle(TG)
    said = [(m.role, m.content) for m in model.requests[-1].messages[1:]]
    # the history starts with Parley's words, which a request may not (Anthropic
    # refuses a first assistant message): they are folded into the user's message
    assert said == [
        ("user", "(earlier, you wrote: Disk is 91 % full on db-1.)\n\nwhat do you mean?"),
    ], said
    history = (await w.session(TG)).history
    assert [m.role for m in history] == ["assistant", "user", "assistant"]
    assert texts_to(w, TG) == ["Disk is 91 % full on db-1.", "ok"]
