"""Routine edge cases: cron shapes that never fire or fire every second, DST, pause/resume,
non-finite windows, full routines arriving mid-turn or asking approvals nobody asked for."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest
from agent_core.proactive.routines import Routine, RoutineError, RoutineStore, parse_add, validate
from agent_core.proactive.runner import EventTriggers
from agent_core.store import keys
from tests.fakes.llm_servers import FakeClock
from tests.integration.agent.conftest import FnModel, user_event

TG = ThreadKey("telegram", "bot1", "500")


def ts(s: str, tz: str) -> float:
    return datetime.fromisoformat(s).replace(tzinfo=ZoneInfo(tz)).timestamp()


async def add(store: RoutineStore, **kw: Any) -> Routine:
    kw.setdefault("notify", "telegram:500")
    r = validate(Routine(**kw))
    assert await store.add(r)
    return r


# --- cron validation ------------------------------------------------------------
@pytest.mark.parametrize("expr", ["* * * * * *", "*/1 * * * * * *"])
def test_cron_with_a_seconds_field_is_refused(expr: str) -> None:
    """Docs: "a five-field cron expression". croniter also accepts a 6th (seconds) and
    7th field, so `* * * * * *` is stored and fires on every scheduler tick (1 s)."""
    with pytest.raises(RoutineError):
        validate(Routine("every-sec", "cron", "p", cron=expr, notify="web:s1"))


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4 *"])
def test_cron_that_never_fires_is_refused(expr: str) -> None:
    """February 30th: accepted, then every tick (each second) logs 'cannot compute its
    next fire' forever, and /routine show shows no next run."""
    with pytest.raises(RoutineError):
        validate(Routine("never", "cron", "p", cron=expr, notify="web:s1"))


# --- DST ------------------------------------------------------------------------------
async def test_daily_routine_fires_once_on_the_dst_fall_back_day(pworld: Any) -> None:
    """`30 2 * * *` Europe/Paris: on 2026-10-25 02:30 happens twice (CEST, then CET).
    A daily routine must run once that day; it runs twice."""
    w = pworld(FnModel(lambda req: Completion("daily report")))
    await w.start()
    start = ts("2026-10-24 12:00", "Europe/Paris")
    clock = FakeClock(start=start)
    p = w.proactive(clock)
    await add(
        p.store,
        name="daily",
        trigger="cron",
        cron="30 2 * * *",
        tz="Europe/Paris",
        prompt="x",
        created_at=start,
    )
    fired = 0
    end = ts("2026-10-25 12:00", "Europe/Paris")
    while clock() < end:  # tick every 5 minutes through the night
        clock.advance(300)
        fired += len(await p.scheduler.tick())
    await p.scheduler.wait_idle()
    assert fired == 1, f"fired {fired} times on the fall-back day"


# --- pause / resume ------------------------------------------------------------------
async def test_resuming_a_paused_routine_does_not_fire_a_stale_schedule(pworld: Any) -> None:
    """Paused for a week, resumed: the routine fires at once (catch-up of a fire that was
    due while it was deliberately paused), instead of waiting for its next scheduled time."""
    w = pworld(FnModel(lambda req: Completion("hello")))
    await w.start()
    clock = FakeClock(start=ts("2026-01-05 10:00", "UTC"))  # Monday 10:00
    p = w.proactive(clock)
    await add(
        p.store, name="nine", trigger="cron", cron="0 9 * * *", prompt="x", created_at=clock()
    )
    await p.store.set_enabled("nine", False)
    clock.advance(7 * 86_400 + 3600)  # next Monday 11:00: not a 09:00
    await p.store.set_enabled("nine", True)
    assert await p.scheduler.tick() == [], "fired at 11:00 for a 09:00 schedule right on resume"


# --- event routine with an unusable number --------------------------------------
@pytest.mark.parametrize("flag", ["--cooldown inf", "--cooldown nan", "--dedup inf"])
async def test_non_finite_cooldown_is_refused_and_never_breaks_ingest(
    pworld: Any, flag: str
) -> None:
    """`/routine add x --event . --cooldown inf` is accepted; then every message that
    matches makes the ingest filter raise (OverflowError / ValueError, only RedisError is
    caught), so Ingest.submit raises: the webhook answers 5xx and the message is lost /
    retried forever. The filter docstring: "never refuses anything"."""
    w = pworld(FnModel(lambda req: Completion("echo")))
    store = RoutineStore(w.redis)
    w.ingest.add_filter(EventTriggers(w.redis, store, refresh_secs=0))
    await w.start()
    try:
        r = validate(parse_add(f"all --event . {flag} --notify telegram:500 x", created_by="c:1"))
    except RoutineError:
        return  # refused at creation: fine
    assert await store.add(r)
    chat = ThreadKey("telegram", "bot1", "77")
    # a user's ordinary message must still be accepted
    res = await w.ingest.submit(user_event(chat, "hello there"))
    assert res.value == "accepted"


# --- a full routine while the user is mid-turn --------------------------------
async def test_full_routine_arriving_mid_turn_gets_its_own_turn(pworld: Any) -> None:
    """A full routine submitted while the user's turn runs is injected into the user's
    turn as if the user had typed it (check_signals does not skip routine:* events).
    The routine never gets its own turn, so its after_turn hook never runs: no outcome
    is recorded and its in-flight slot stays taken (turn timeout + lock TTL), so the
    next fires are skipped as 'already in flight'."""
    gate = asyncio.Event()
    entered = asyncio.Event()

    class Gated(FnModel):
        async def complete(self, request: CompletionRequest) -> Completion:
            self.requests.append(request)
            if request.messages[-1].content == "long question" and not gate.is_set():
                entered.set()
                await gate.wait()
                # one tool round so that the loop checks for new messages
                from tests.integration.agent.conftest import call

                return Completion("", tool_calls=(call("sleepy", ms=1, label="s"),))
            return Completion("answer to: " + request.messages[-1].content[:40])

    w = pworld(Gated(lambda r: Completion("")), admin_ids="telegram:500")
    await w.start()
    p = w.proactive()
    await add(
        p.store,
        name="digest",
        trigger="manual",
        action="full",
        prompt="post the digest",
        created_by="telegram:500",
    )
    await w.send(user_event(TG, "long question", "500"))
    await asyncio.wait_for(entered.wait(), 5)
    await p.store.queue_run("digest")
    assert await p.scheduler.tick() == ["digest"]
    await p.scheduler.wait_idle()
    gate.set()
    await w.settle(TG)
    await asyncio.sleep(0.2)
    outcomes = [r.outcome for r in await p.store.runs("digest")]
    merged = [
        r
        for r in w.model.requests
        if any(m.content == "long question" for m in r.messages)
        and any("[routine digest]" in (m.content or "") for m in r.messages)
    ]
    assert any(o.startswith("turn:") for o in outcomes), (
        f"outcomes {outcomes}; model requests mixing the user's turn and the routine: {len(merged)}"
    )
    assert await w.redis.zcard(keys.routine_running("digest")) == 0, "slot still held"


# --- a full routine that nobody can approve -----------------------------------------
async def test_full_routine_on_web_target_approval_can_be_decided_by_the_chat_user(
    pworld: Any,
) -> None:
    """Docs: the job runs as the creator, else an admin/approver on that channel, else as
    `routine` ("fine on the local channels"). On web the job runs as web:routine, so its
    approval's requester is web:routine: the person in that web chat cannot decide it, and
    their own messages are held behind it until the approval expires (30 min)."""
    from tests.integration.agent.conftest import call, tools_then_answer

    model = FnModel(tools_then_answer(("[routine webjob] count it", [call("counter", label="x")])))
    w = pworld(model)
    await w.start()
    p = w.proactive()
    web = ThreadKey("web", "local", "sess1")
    await add(
        p.store,
        name="webjob",
        trigger="manual",
        action="full",
        prompt="count it",
        notify="web:sess1",
        created_by="console:operator",
    )
    await p.store.queue_run("webjob")
    await p.scheduler.tick()
    await p.scheduler.wait_idle()
    await w.settle(web)
    assert len(w.prompts(web)) == 1
    # the person using that web chat (web:sess1 is their session) answers yes
    await w.send(user_event(web, "yes", "sess1"))
    await w.settle(web)
    assert await w.counter() == 1, w.texts(web)[-2:]
