"""Edges of turns, redeliveries and approvals (real workers, real Valkey): each test failed before its fix."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from agent_core.agent.fences import with_marker
from agent_core.agent.interrupt import interrupt_filter
from agent_core.agent.session import ThreadState
from agent_core.events import EventKind, ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, StreamItem, TextDelta
from agent_core.proactive.recovery import FAILED_NOTICE
from agent_core.store import keys
from agent_core.store.delivery import Delivery
from tests.integration.agent.approval_helpers import add_slow_tool, approval_id, press
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event


def model() -> FnModel:
    return FnModel(
        tools_then_answer(
            ("count it", [call("counter", label="x")]),
            ("slow", [call("sleepy", ms=1500, label="z")]),
            ("post it", [call("slowask", label="order", ms=1500)]),
        )
    )


# 1 -----------------------------------------------------------------------------------
async def test_a_redelivered_interrupt_does_not_stop_a_later_turn(world: Any) -> None:
    """A platform redelivers an update it thinks was not acknowledged (Slack retries
    after 3 s, Telegram re-posts a webhook, the web page re-posts on a dropped
    connection).  Ingest drops the duplicate, but the /interrupt filter runs before
    the dedup claim: the duplicate sets the interrupt flag of whatever turn is running
    now, a later question the person never asked to stop."""
    T = ThreadKey("web", "local", "redeliver")
    w = world(model())
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    stop = user_event(T, "/interrupt", eid="int-1")
    await w.send(stop)  # nothing running: "Nothing is running right now."
    await w.settle(T)
    await w.send(user_event(T, "slow"))  # a new question; its tool takes 1.5 s
    await asyncio.sleep(0.5)
    await w.send(stop)  # the same update delivered again: a duplicate
    await w.settle(T, 15)
    texts = w.texts(T)
    assert not any("Stopped" in t for t in texts), texts
    assert texts[-1] == "done: z", texts


# 2 -----------------------------------------------------------------------------------
async def test_a_command_whose_turn_fails_is_told_like_a_message(world: Any) -> None:
    """docs/reliability.md: an unexpected error in a turn -> the message is skipped
    and the person gets "Something went wrong ...".  Telegram (any "/..." message) and
    Discord (slash commands) send commands as EventKind.COMMAND, and
    TurnRecovery.tell_failed only tells MESSAGE and ACTION: the person hears nothing."""
    T = ThreadKey("telegram", "bot1", "cmdfail")
    w = world(model())
    make = w.make_agent

    def with_bad_command() -> Any:
        agent = make()

        async def boom(ctx: Any, args: str) -> str:
            raise RuntimeError("a bug in a command")

        agent.commands.add("boom", "fails", boom)
        return agent

    w.make_agent = with_bad_command  # type: ignore[method-assign]
    await w.start()
    await w.send(user_event(T, "/boom"))  # as the web chat sends it (MESSAGE)
    await w.settle(T)
    assert w.texts(T).count(FAILED_NOTICE) == 1  # told
    await w.send(user_event(T, "/boom", kind=EventKind.COMMAND))  # as Telegram sends it
    await w.settle(T)
    assert w.texts(T).count(FAILED_NOTICE) == 2, w.texts(T)  # silence


# 3 -----------------------------------------------------------------------------------
async def test_a_conversation_idle_past_its_session_ttl_answers_at_once(world: Any) -> None:
    """SESSION_IDLE_TTL_SECS (>= 60 s) also bounds {thread}:next (COMPLETE sets it with
    the session's TTL), but the ingest arrival counter lives 30 days (SEQ_TTL_SECS).
    A person back after the session expired sends arrival N+1 while `next` is gone
    (read as 1): the worker takes the message for one whose earlier arrival is still
    on its way and holds it for 3 x RECLAIM_IDLE_SECS + 2 sweeps (19 s by default)."""
    T = ThreadKey("web", "local", "idle")
    w = world(model(), reclaim_idle_secs=2.0, sweep_interval_secs=0.5)
    make = w.make_agent

    def short_ttl() -> Any:
        agent = make()
        # as bots/runtime.py builds it: session_ttl_ms = SESSION_IDLE_TTL_SECS * 1000
        d = Delivery(w.redis, w.clients.blocking, lock_ttl_ms=3000, session_ttl_ms=1500)
        agent.delivery = d
        agent.redis = d.redis
        return agent

    w.make_agent = short_ttl  # type: ignore[method-assign]
    await w.start()
    await w.send(user_event(T, "hello"))
    await w.settle(T)
    assert w.texts(T) == ["echo: hello"]
    await asyncio.sleep(2.0)  # idle past the session's TTL
    assert await w.redis.exists(keys.session(T)) == 0  # the session expired...
    assert await w.redis.exists(keys.seq(T)) == 1  # ...the arrival counter did not
    sent = time.monotonic()
    await w.send(user_event(T, "back again"))
    while len(w.texts(T)) < 2 and time.monotonic() - sent < 15:
        await asyncio.sleep(0.05)
    took = time.monotonic() - sent
    assert w.texts(T)[-1] == "echo: back again"
    assert took < 1.5, f"answered after {took:.1f} s"


# 4 -----------------------------------------------------------------------------------
async def test_deny_with_a_capitalised_twelve_letter_reason_denies(world: Any) -> None:
    """docs/agent.md: `/deny [id] [reason]` - "the first word is taken as an id only if
    it is one".  commands._split_id takes any 12-character url-safe word that is not
    all lowercase as an id: `/deny Unacceptable` looks up an approval named
    'Unacceptable', answers "That approval is not active any more." and leaves the
    real one pending."""
    T = ThreadKey("telegram", "bot1", "deny")
    w = world(model())
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    assert len(w.prompts(T)) == 1
    await w.send(user_event(T, "/deny Unacceptable"))
    await w.settle(T)
    s = await w.session(T)
    assert s.state != ThreadState.AWAITING_APPROVAL, (
        f"still waiting; the person was told: {w.texts(T)[-1]!r}"
    )
    assert await w.counter() == 0


# 5 -----------------------------------------------------------------------------------
async def test_an_approved_call_cut_off_by_a_shutdown_is_not_run_again(world: Any) -> None:
    """docs/agent.md: "Approve runs it once"; a decided approval whose turn is given up
    reports "may or may not have run" rather than running it again.  A deploy's SIGTERM
    past SHUTDOWN_GRACE_SECS while the approved tool runs leaves the press in the
    mailbox; the next worker reruns the press, the claim answers WON (same event) with
    no stored result, and the approved call (an order POST, say) runs a second time."""
    T = ThreadKey("telegram", "bot1", "approved-twice")
    w = world(model(), shutdown_grace_secs=0.3)
    add_slow_tool(w)
    await w.start()
    await w.send(user_event(T, "post it"))
    await w.settle(T)
    aid = approval_id(w, T)
    await w.send(press(T, f"ap:{aid}:a"))
    for _ in range(100):  # the approved call is running
        if await w.redis.get("test:started:order"):
            break
        await asyncio.sleep(0.02)
    await w.stop()  # SIGTERM: the grace runs out while the tool runs
    await w.start()  # the next process
    await w.settle(T, 15)
    started = int(await w.redis.get("test:started:order") or 0)
    assert started == 1, f"the approved call was started {started} times"


# 6 -----------------------------------------------------------------------------------
async def test_interrupt_after_a_given_up_decision_turn_keeps_the_real_result(
    world: Any,
) -> None:
    """docs/agent.md: a decided approval whose turn was given up leaves the session
    waiting; "the next message ends the wait with what really happened: the tool's
    result if it ran (an approved call is never reported as "not run" ...)".  When that
    next message is /interrupt (or /stop), cancel_pending claims, gets ALREADY
    ('approve'), and still ends the wait with "not run: the user cancelled the
    request": the model is told the order it placed was never placed."""
    from tests.integration.agent.test_approval_decision_turn_lost_after_claim import (
        SlowAfterTool,
    )

    T = ThreadKey("telegram", "bot1", "given-up-interrupt")
    model = SlowAfterTool(tools_then_answer(("count it", [call("counter", label="x")])))
    w = world(model, turn_timeout_secs=1.0)
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    await w.send(press(T, f"ap:{approval_id(w, T)}:a"))
    await w.settle(T)
    assert await w.counter() == 1  # the approved call ran
    assert any("took longer" in t for t in w.texts(T))  # its turn was given up
    model.slow = False
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T)
    s = await w.session(T)
    results = [m.content for m in s.history if m.role == "tool"]
    assert results == ["counted x -> 1"], results
    assert "cancelled" not in w.texts(T)[-1]  # nothing was: it had been decided


# streamed previews cut by a timeout or a shutdown --------------------------------------
class StallingModel(FnModel):
    """Streams half a sentence, then stalls (for 30 s: far past the turn's timeout)."""

    def __init__(self) -> None:
        super().__init__(lambda req: Completion("unused"))
        self.stalled = asyncio.Event()

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        self.requests.append(request)
        yield TextDelta("The three steps are: first, open the ")
        self.stalled.set()
        await asyncio.sleep(30)
        yield TextDelta("settings.")
        yield Completion("The three steps are: first, open the settings.")


async def test_a_preview_cut_by_the_turn_timeout_is_marked(world: Any) -> None:
    """Before: the cancel of TURN_TIMEOUT_SECS went past Turn.loop's handlers, so
    the half sentence stayed on screen unmarked (unlike /interrupt's "_(stopped)_"
    and an LLM error's "_(cut off)_")."""
    T = ThreadKey("web", "local", "stream-timeout")
    w = world(StallingModel(), turn_timeout_secs=0.5)
    w.outbox.stream_interval = 1.0
    await w.start()
    await w.send(user_event(T, "how do I do it?"))
    await w.settle(T)
    shown = w.texts(T)
    assert any("took longer" in t for t in shown), shown  # the notice came
    assert shown[0] == with_marker("The three steps are: first, open the ", "_(cut off)_"), shown


async def test_a_preview_cut_by_a_shutdown_is_not_edited(world: Any) -> None:
    """A shutdown's cancel (not the deadline) makes no edit: the message stays
    queued and its rerun edits that same preview to the new answer."""
    T = ThreadKey("web", "local", "stream-shutdown")
    model = StallingModel()
    w = world(model, shutdown_grace_secs=0.1)
    w.outbox.stream_interval = 1.0
    await w.start()
    await w.send(user_event(T, "how do I do it?"))
    await asyncio.wait_for(model.stalled.wait(), 10)
    await asyncio.sleep(0.1)  # the preview is out
    await asyncio.wait_for(w.stop(), 10)
    assert w.texts(T) == ["The three steps are: first, open the "]
    assert [s.op for s in w.outbox.log if s.thread == str(T) and s.op != "typing"] == ["send"]
