"""A platform that asks to wait (SendRateLimited) never costs the answer.

Every channel raises SendRateLimited once it stops waiting on a 429 itself
(Telegram after TELEGRAM_MAX_RETRY_WAIT, Slack after 60 s, Discord for any wait
over DISCORD_MAX_RETRY_WAIT, a pace another worker paused included).  Before, the
worker took it for a crash: the message was consumed with a traceback and "⚠️
Something went wrong on my side", the model's answer (already paid for) thrown
away, a streamed preview left cut short.  Now the reply writer waits what the
platform asked and sends again, for as long as it asks; /interrupt and a
shutdown end the wait (a shutdown hands the message back for after the wait);
the streamed preview's droppable edits are still skipped; and the time waited
does not count toward TURN_TIMEOUT_SECS (agent_core.deadline).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent_core import deadline
from agent_core.agent.budget import BudgetGuard
from agent_core.agent.interrupt import interrupt_filter
from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.deadline import platform_wait, turn_deadline
from agent_core.errors import SendRateLimited, TurnHandedBack
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.llm.base import (
    Completion,
    CompletionRequest,
    ModelInfo,
    StreamItem,
    TextDelta,
    TokenUsage,
)
from agent_core.outbox import edit_skipped
from agent_core.store import keys
from tests.fakes.outbox import RecordingOutbox
from tests.integration.agent.conftest import FnModel, last_user, user_event

FAILED = "Something went wrong"


@pytest.fixture(autouse=True)
def quick_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scaled: the least wait for a SendRateLimited (1 s) becomes 10 ms."""
    monkeypatch.setattr(ReplyWriter, "rate_limit_min_wait", 0.01, raising=False)


def answer() -> FnModel:
    return FnModel(lambda req: Completion("answer: " + last_user(req), usage=TokenUsage(1, 1)))


@dataclass
class LimitedOutbox(RecordingOutbox):
    """Refuses the first ``refused_sends`` sends of an answer and the first ``final_edits``
    final edits with SendRateLimited(``retry_after``), and every streamed
    (non-final) edit while ``limit_previews``; counts what was tried."""

    refused_sends: int = 0
    final_edits: int = 0
    limit_previews: bool = False
    retry_after: float = 0.05
    tried: list[str] = field(default_factory=list)
    tried_any: asyncio.Event = field(default_factory=asyncio.Event)

    def _refuse(self, what: str) -> None:
        self.tried.append(what)
        self.tried_any.set()
        raise SendRateLimited(self.retry_after, "the platform asks to wait")

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        if self.refused_sends > 0 and not message.notice:
            self.refused_sends -= 1
            self._refuse("send")
        self.tried.append("send ok")
        return await super().send(thread, message, reply_to=reply_to)

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        if message.final and self.final_edits > 0:
            self.final_edits -= 1
            self._refuse("final edit")
        if not message.final and self.limit_previews:
            self._refuse("preview edit")
        self.tried.append("final edit ok" if message.final else "preview edit ok")
        return await super().edit(ref, message)


class Streams:
    """Streams its answer in two pieces."""

    name = "fn:stream"

    def __init__(self) -> None:
        self.inner = answer()
        self.requests = self.inner.requests

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        c = await self.inner.complete(request)
        head, tail = c.text[:8], c.text[8:]
        yield TextDelta(head)
        await asyncio.sleep(0.02)
        yield TextDelta(tail)
        yield c


async def _wait_handed_back(w: Any, step: float, what: str) -> None:
    """Until T's lock says the turn was handed back for later (500 looks ``step``
    apart); fails with ``what`` and the lock's value if it never does."""
    for _ in range(500):
        held = await w.redis.get(keys.lock(T))
        if held is not None and held.endswith(b"~later"):
            return
        await asyncio.sleep(step)
    raise AssertionError(f"{what}: {held!r}")


def use(w: Any, outbox: RecordingOutbox) -> None:
    w.outbox = outbox
    for name in list(w.outboxes):
        w.outboxes[name] = outbox


T = ThreadKey("web", "local", "rl")


async def test_a_rate_limited_answer_is_sent_after_the_wait(world: Callable[..., Any]) -> None:
    model = answer()
    w = world(model)
    outbox = LimitedOutbox(refused_sends=2)
    use(w, outbox)
    await w.start()
    await w.send(user_event(T, "hi"))
    await w.settle(T, timeout=15)
    assert w.texts(T) == ["answer: hi"]  # no failure notice, nothing lost
    assert outbox.tried == ["send", "send", "send ok"]
    assert len(model.requests) == 1  # the answer paid for is the one sent


async def test_a_rate_limited_final_edit_completes_the_streamed_answer(
    world: Callable[..., Any],
) -> None:
    model = Streams()
    w = world(model)
    # the preview's streamed edit is refused for good (droppable: skipped, never
    # waited for), the final edit twice (waited out)
    outbox = LimitedOutbox(stream_interval=0.0, final_edits=2, limit_previews=True)
    use(w, outbox)
    await w.start()
    await w.send(user_event(T, "streamed"))
    await w.settle(T, timeout=15)
    assert w.texts(T) == ["answer: streamed"]  # not left cut short at the preview
    assert outbox.tried == ["send ok", "preview edit", "final edit", "final edit", "final edit ok"]


async def test_interrupt_ends_the_wait_for_the_platform(world: Callable[..., Any]) -> None:
    model = answer()
    w = world(model)
    outbox = LimitedOutbox(refused_sends=1_000, retry_after=600)  # the answer: refused for good
    use(w, outbox)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(T, "hi"))
    await asyncio.wait_for(outbox.tried_any.wait(), 10)  # the answer waits for the platform
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T, timeout=15)  # not the 600 s asked for
    said = w.texts(T)
    assert said == ["⏹ Stopped."], said  # no failure notice, no "Nothing is running"
    assert outbox.tried.count("send") == 1  # tried once, then waited until /interrupt


async def test_a_shutdown_during_the_wait_hands_the_message_back_for_after_it(
    world: Callable[..., Any],
) -> None:
    model = answer()
    w = world(model, shutdown_grace_secs=30)
    outbox = LimitedOutbox(refused_sends=1_000, retry_after=600)
    use(w, outbox)
    await w.start()
    await w.send(user_event(T, "hi"))
    await asyncio.wait_for(outbox.tried_any.wait(), 10)
    # a deploy: the drain does not wait out the 600 s (nor its 30 s grace) for it
    await asyncio.wait_for(w.stop(), 10)
    assert await w.redis.llen(keys.mailbox(T)) == 1  # the message stays queued
    held = await w.redis.get(keys.lock(T))
    assert held is not None and held.endswith(b"~later"), held  # handed back for later
    assert 0 < await w.redis.pttl(keys.lock(T)) <= 600_000  # what is left of the wait
    assert w.texts(T) == []  # no failure notice
    # the wait is over (scaled: the hold is cut short) and the platform takes it
    await w.redis.pexpire(keys.lock(T), 1)
    outbox.refused_sends = 0
    await w.start()
    await w.settle(T, timeout=15)
    assert w.texts(T) == ["answer: hi"]
    assert len(model.requests) == 2  # (the rerun asks the model again)


async def test_a_shutdown_while_the_final_edit_waits_never_sends_the_answer_twice(
    world: Callable[..., Any],
) -> None:
    model = Streams()
    w = world(model)
    outbox = LimitedOutbox(stream_interval=0.0, final_edits=1_000, retry_after=600)
    use(w, outbox)
    await w.start()
    await w.send(user_event(T, "streamed"))
    await asyncio.wait_for(outbox.tried_any.wait(), 10)  # the preview shows; its end waits
    await asyncio.wait_for(w.stop(), 10)
    assert await w.redis.llen(keys.mailbox(T)) == 1
    await w.redis.pexpire(keys.lock(T), 1)
    outbox.final_edits = 0
    await w.start()
    await w.settle(T, timeout=15)
    assert w.texts(T) == ["answer: streamed"]
    assert len(outbox.sends(str(T))) == 1  # the rerun edited the preview, sent nothing new


async def test_interrupt_during_the_final_edits_wait_marks_the_preview_stopped(
    world: Callable[..., Any],
) -> None:
    """/interrupt lands while the final edit of a streamed answer waits for the
    platform: the preview (cut short: its streamed edit was skipped) gets the
    "(stopped)" marker like any preview cut while streaming.  It used to be left
    as it was: the reply counted as finished before its final edit was made."""
    model = Streams()
    w = world(model)
    outbox = LimitedOutbox(stream_interval=0.0, final_edits=1, retry_after=600, limit_previews=True)
    use(w, outbox)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(T, "streamed"))
    for _ in range(1000):  # the final edit is refused: it waits the 600 s asked
        if "final edit" in outbox.tried:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError(f"the final edit was never tried: {outbox.tried}")
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T, timeout=15)
    said = w.texts(T)
    assert said == ["answer: streamed\n\n_(stopped)_", "⏹ Stopped."], said


async def test_a_send_rate_limited_that_reaches_the_worker_hands_the_message_back(
    world: Callable[..., Any],
) -> None:
    """The last resort: a SendRateLimited out of a turn is not a crash (no traceback,
    no failure notice, the message not consumed): the thread is handed back for the
    wait and the message run again."""
    model = answer()
    w = world(model)
    await w.start()
    worker = w.workers[0][0]
    run_turn = worker.recovery.run_turn
    calls = 0

    async def limited_once(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise SendRateLimited(1.5, "the platform asks to wait")
        return await run_turn(*args)

    worker.recovery.run_turn = limited_once
    await w.send(user_event(T, "hi"))
    await _wait_handed_back(w, 0.01, "not handed back for the wait")
    assert calls == 1  # no other turn while the platform's wait lasts
    assert await w.redis.llen(keys.mailbox(T)) == 1
    await w.settle(T, timeout=15)
    assert w.texts(T) == ["answer: hi"]
    assert calls == 2


@dataclass
class WaitingOutbox(RecordingOutbox):
    """Waits for the platform inside its send, as the channels' senders do."""

    wait: float = 0.0

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        if self.wait and not message.notice:
            await platform_wait(self.wait)
        return await super().send(thread, message, reply_to=reply_to)


async def test_a_wait_for_the_platform_does_not_count_toward_the_turn_timeout(
    world: Callable[..., Any],
) -> None:
    model = answer()
    w = world(model, turn_timeout_secs=0.5)  # scaled: 600 s, and a Retry-After of 3600
    outbox = WaitingOutbox(wait=1.5)
    use(w, outbox)
    await w.start()
    await w.send(user_event(T, "hi"))
    await w.settle(T, timeout=15)
    assert w.texts(T) == ["answer: hi"]  # not "That took longer than 0.5 seconds"
    # the turn's own work still counts: a slow model is stopped as before
    model.delay = 2.0
    outbox.wait = 0.0
    await w.send(user_event(T, "slow"))
    await w.settle(T, timeout=15)
    assert "took longer than 0.5 seconds" in w.texts(T)[-1]


async def test_interrupt_during_a_command_replys_wait_says_stopped(
    world: Callable[..., Any],
) -> None:
    w = world(answer())
    outbox = LimitedOutbox(refused_sends=1_000, retry_after=600)  # notices go through
    use(w, outbox)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(T, "/help"))
    await asyncio.wait_for(outbox.tried_any.wait(), 10)  # /help's reply waits for the platform
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T, timeout=15)
    said = w.texts(T)
    assert any("Stopped" in t for t in said), said  # the person is told


# -- review of the rate-limit waits (2026-11-25, second pass) ----------------


async def _hand_back_during_the_wait(w: Any, outbox: LimitedOutbox) -> None:
    """The answer waits for the platform, and a deploy hands the turn back."""
    await w.start()
    await w.send(user_event(T, "hi"))
    await asyncio.wait_for(outbox.tried_any.wait(), 10)
    await asyncio.wait_for(w.stop(), 10)
    held = await w.redis.get(keys.lock(T))
    assert held is not None and held.endswith(b"~later"), held


@pytest.mark.parametrize("flag_expired", [False, True])
async def test_an_interrupt_sent_while_the_thread_is_held_back_stops_the_rerun(
    world: Callable[..., Any], flag_expired: bool
) -> None:
    """An /interrupt sent while the thread is held (the turn handed back for the
    platform's wait) was flagged with a time before the rerun began, which the
    rerun ignored: it asked the model again and sent the answer the person tried
    to stop, then "Nothing is running right now.".  The rerun now heeds a stop
    sent since the hand-back, by its flag or (the flag lives 10 minutes, a hold up
    to an hour) by the command queued in the mailbox."""
    model = answer()
    w = world(model, shutdown_grace_secs=30)
    outbox = LimitedOutbox(refused_sends=1_000, retry_after=600)
    use(w, outbox)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await _hand_back_during_the_wait(w, outbox)
    await w.send(user_event(T, "/interrupt"))  # the person gives up on that answer
    outbox.refused_sends = 0
    await w.start()
    for _ in range(500):  # queued behind the held message
        if await w.redis.llen(keys.mailbox(T)) == 2:
            break
        await asyncio.sleep(0.01)
    if flag_expired:
        await w.redis.delete(keys.interrupt(T))
    # the wait is over (scaled: the hold cut short), the platform takes messages again
    await w.redis.pexpire(keys.lock(T), 1)
    await w.settle(T, timeout=15)
    said = w.texts(T)
    assert said == ["⏹ Stopped."], said  # not the answer, nor "Nothing is running"
    assert len(model.requests) == 1  # the rerun did not ask the model again
    assert await w.redis.llen(keys.mailbox(T)) == 0


async def test_an_interrupt_flagged_during_a_hold_lives_as_long_as_the_hold(
    world: Callable[..., Any],
) -> None:
    """The flag lived 10 minutes, the hold up to an hour: it is kept past the hold."""
    w = world(answer(), shutdown_grace_secs=30)
    outbox = LimitedOutbox(refused_sends=1_000, retry_after=3_000)
    use(w, outbox)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await _hand_back_during_the_wait(w, outbox)
    hold_ms = await w.redis.pttl(keys.lock(T))
    await w.send(user_event(T, "/interrupt"))
    assert await w.redis.pttl(keys.interrupt(T)) > hold_ms


async def test_an_interrupt_before_the_hand_back_does_not_stop_the_rerun(
    world: Callable[..., Any],
) -> None:
    """Only a stop sent since the hand-back counts: an earlier /interrupt, already
    answered, does not stop the rerun."""
    model = answer()
    w = world(model, shutdown_grace_secs=30)
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T, timeout=15)
    assert w.texts(T) == ["Nothing is running right now."]
    await w.stop()
    outbox = LimitedOutbox(refused_sends=1_000, retry_after=600)
    use(w, outbox)
    await _hand_back_during_the_wait(w, outbox)
    await w.redis.pexpire(keys.lock(T), 1)
    outbox.refused_sends = 0
    await w.start()
    await w.settle(T, timeout=15)
    assert w.texts(T) == ["answer: hi"], w.texts(T)


class StreamsPaid(Streams):
    """Streams its answer; its tokens have a price."""

    def __init__(self) -> None:
        super().__init__()
        info = ModelInfo("p", input_cost_per_token=0.001, output_cost_per_token=0.001)
        self.inner = FnModel(lambda req: Completion("answer: " + last_user(req)), info)
        self.requests = self.inner.requests


async def test_a_model_call_ended_by_a_hand_back_is_still_booked(
    world: Callable[..., Any],
) -> None:
    """A turn handed back while its streamed answer's first message waits for the
    platform (TurnHandedBack out of StreamingReply.feed, inside the model call)
    booked nothing: the provider billed the prompt and what streamed all the same,
    and every hand-back was a free model call as far as the budgets could tell."""
    w = world(StreamsPaid(), user_daily_budget_usd=5.0, daily_budget_usd=5.0)
    outbox = LimitedOutbox(stream_interval=0.0, refused_sends=1_000, retry_after=600)
    use(w, outbox)
    await w.start()
    await w.send(user_event(T, "write me something " + "please " * 20))
    await asyncio.wait_for(outbox.tried_any.wait(), 10)  # the preview waits for the platform
    await asyncio.wait_for(w.stop(), 10)  # a deploy: handed back
    spend = await BudgetGuard(w.redis, w.settings).spend("web:u1")
    assert spend.user_usd > 0, spend


class Refusing(RecordingOutbox):
    """Every send: SendRateLimited(``retry_after``) (a platform stuck in flood control)."""

    def __init__(self, retry_after: float) -> None:
        super().__init__()
        self.retry_after = retry_after
        self.tries = 0

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        self.tries += 1
        if self.tries > 1_000:
            raise RuntimeError("still waiting after 1000 refusals")
        raise SendRateLimited(self.retry_after, "flood control")


async def test_a_platform_that_never_stops_asking_hands_the_turn_back_at_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ReplyWriter retried SendRateLimited without bound, and every wait moved the
    turn's deadline back: a platform answering 429 for good held the turn (its
    thread, a worker's slot) for hours.  Now a turn waits MAX_PLATFORM_WAIT_SECS
    (an hour) in all at most; the wait that would go past it is not made, the
    turn is handed back for it (scaled: 0.3 s of 50 ms waits)."""
    cap = 0.3
    monkeypatch.setattr(ReplyWriter, "max_platform_wait", cap)
    monkeypatch.setattr(deadline, "MAX_PLATFORM_WAIT_SECS", cap)
    outbox = Refusing(0.05)
    writer = ReplyWriter(outbox, None, T, "e1", {}, LockGuard())  # type: ignore[arg-type]
    async with asyncio.timeout(30) as tm:  # TURN_TIMEOUT_SECS
        with turn_deadline(tm):
            before = tm.when()
            assert before is not None
            with pytest.raises(TurnHandedBack) as caught:
                await writer.say(OutboundMessage("answer"))
            moved = (tm.when() or 0) - before
    assert caught.value.retry_after >= 0.05  # held back for the wait it did not make
    assert writer.waited <= cap
    assert outbox.tries <= round(cap / 0.05) + 1, outbox.tries
    assert moved <= cap + 1e-6, moved


async def test_the_turn_deadline_moves_back_the_cap_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Waits inside the senders (platform_wait) add up too: the deadline moves back
    by MAX_PLATFORM_WAIT_SECS in all at most; past it the waits count toward the
    turn's clock (scaled)."""
    monkeypatch.setattr(deadline, "MAX_PLATFORM_WAIT_SECS", 0.2)
    async with asyncio.timeout(30) as tm:
        with turn_deadline(tm):
            before = tm.when()
            assert before is not None
            for _ in range(5):
                await platform_wait(0.1)
            assert deadline.waited() == pytest.approx(0.2)
            assert (tm.when() or 0) - before == pytest.approx(0.2)


async def test_an_endless_rate_limit_frees_the_worker_and_holds_the_thread(
    world: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a worker: past the cap the turn is handed back (the thread held for the
    wait, the message still queued), not waited out for ever."""
    monkeypatch.setattr(ReplyWriter, "max_platform_wait", 0.3)
    w = world(answer())
    outbox = LimitedOutbox(refused_sends=1_000_000, retry_after=0.05)
    use(w, outbox)
    await w.start()
    await w.send(user_event(T, "hi"))
    await _wait_handed_back(w, 0.02, "not handed back at the cap")
    assert outbox.tried.count("send") <= round(0.3 / 0.05) + 1, outbox.tried
    assert await w.redis.llen(keys.mailbox(T)) == 1
    assert w.texts(T) == []


@dataclass
class SkippingOutbox(RecordingOutbox):
    """Skips the first ``skip_previews`` streamed edits as a channel does when no
    pacing slot is free (a Telegram group): the edit returns the ref unchanged and
    reports the skip (``agent_core.outbox.edit_skipped``)."""

    skip_previews: int = 0

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        if not message.final and self.skip_previews > 0:
            self.skip_previews -= 1
            edit_skipped()
            return ref
        return await super().edit(ref, message)


class StallsAfterASkippedEdit(FnModel):
    """Its second piece comes after the stream interval (an edit is due at once),
    then the stream stalls until ``release``."""

    def __init__(self) -> None:
        super().__init__(lambda req: Completion("The answer is 42."))
        self.release = asyncio.Event()

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        self.requests.append(request)
        yield TextDelta("The answer is")
        await asyncio.sleep(0.3)
        yield TextDelta(" 42.")
        await self.release.wait()
        yield Completion("The answer is 42.")


async def test_a_skipped_streamed_edit_is_made_again_once_it_may(
    world: Callable[..., Any],
) -> None:
    # Before: a skipped edit counted as shown, and nothing edited again during the
    # stall: the preview stayed at "The answer is".
    model = StallsAfterASkippedEdit()
    w = world(model)
    outbox = SkippingOutbox(stream_interval=0.2, skip_previews=1)
    use(w, outbox)
    await w.start()
    await w.send(user_event(T, "what is it?"))
    try:
        for _ in range(200):
            if outbox.skip_previews == 0:  # the edit with " 42." was skipped
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0)  # well past the stream interval, still stalled
        during = w.texts(T)
    finally:
        model.release.set()
    await w.settle(T)
    assert outbox.skip_previews == 0
    assert during == ["The answer is 42."], during
    assert w.texts(T) == ["The answer is 42."]
