"""The worker: consume the inbox stream, run turns, one thread at a time.

Loops (all owned by :meth:`Worker.run`, all stopped by its ``stop`` event):

* **consume**  XREADGROUP (own blocking connection) -> hand-off -> spawn the
  threads whose lock we got.  Reading pauses while ``worker_concurrency``
  threads are running, or while the event loop lags more than
  ``worker_busy_lag_ms`` with 16+ threads in hand (the CPU is saturated: unread
  messages wait in the stream, where another worker can take them; see
  :mod:`agent_core.loadgate`).
* **heartbeat** renews every held thread lock in one pipeline every TTL/3; a
  thread whose lock is gone is flagged so its turn stops sending.
* **sweeper**  reclaims stream entries left pending by a dead worker
  (XAUTOCLAIM) and runs threads with a non-empty mailbox whose lock expired.

A thread task runs turns until its mailbox is empty: begin (one round trip)
-> agent turn -> complete (one script: save session, drop consumed entries,
release the lock only if nothing is left).  A thread whose conversation moved
to another thread (``TurnState.moved_to``, agent_core.agent.move) runs nothing:
its events are handed off to that thread instead.

On stop: no new reads; running turns get ``shutdown_grace_secs`` to finish;
what is left is cancelled and its lock released, its entries stay in the
mailbox for another worker (nothing is acknowledged that was not handled).  A
turn waiting out a platform's rate limit is handed back at once, its thread held
until the platform's wait is over (so is one whose send still ends with
SendRateLimited: never consumed as a failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent_core.agent.agent import Agent
from agent_core.agent.reply import LockGuard
from agent_core.errors import LockLost, SendRateLimited, TurnHandedBack
from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.loadgate import MIN_RUNNING, LoopLag
from agent_core.metrics import METRICS
from agent_core.proactive.recovery import TurnRecovery, forbidden
from agent_core.settings import CoreSettings
from agent_core.store.client import bounded
from agent_core.store.delivery import Delivery, TurnState

log = logging.getLogger(__name__)

# the longest a thread is held back after a turn handed back during a platform's
# rate-limit wait (a Retry-After beyond it is waited out by the rerun's send)
HAND_BACK_MAX_SECS = 3600.0


def _next_after(consumed: list[InboundEvent]) -> int:
    """The arrival number that runs after ``consumed`` (0: no numbers)."""
    top = max((ev.seq for ev in consumed), default=0)
    return top + 1 if top else 0


def worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class WorkerLoopDied(RuntimeError):
    """One of the worker's own loops (consume, heartbeat, sweeper) stopped."""


class Worker:
    def __init__(
        self,
        settings: CoreSettings,
        delivery: Delivery,
        agent: Agent,
        *,
        name: str | None = None,
        on_turn: Callable[[ThreadKey, str, float], None] | None = None,
    ) -> None:
        self.settings = settings
        self.delivery = delivery
        self.agent = agent
        self.name = name or worker_name()
        self.owner = self.name  # lock owner token
        self.on_turn = on_turn
        self.running: dict[ThreadKey, asyncio.Task[None]] = {}
        self.guards: dict[ThreadKey, LockGuard] = {}
        self.ready = False
        self.stopping = False
        self.turns_done = 0
        self.reclaimed = 0
        self._next_consumer_sweep = 0.0  # when the sweeper next drops departed consumers
        # (thread, part, marker): claims of sends that never left, to take back
        self._unsent: list[tuple[ThreadKey, str, str]] = []
        # how long a thread waits for an earlier arrival whose reader died: long
        # enough for the sweeper to reclaim it
        self.gap_wait = 3 * settings.reclaim_idle_secs + 2 * settings.sweep_interval_secs
        # proactive (issue 12): turn timeout and interrupted-turn reset around every turn
        self.recovery = TurnRecovery(settings, agent, self.owner)
        self.loop_lag = LoopLag()
        self.busy_min_running = MIN_RUNNING  # the gate holds back only with this many
        self.busy_pauses = 0  # reads skipped because the loop lagged

    # -- lifecycle ---------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        await self._with_backoff(self.delivery.ensure_group, stop)
        self.ready = True
        log.info(
            "worker %s consuming (concurrency %d)", self.name, self.settings.worker_concurrency
        )
        loops = [
            asyncio.create_task(self._consume(stop), name="consume"),
            asyncio.create_task(self._heartbeat(stop), name="heartbeat"),
            asyncio.create_task(self._sweep(stop), name="sweeper"),
            asyncio.create_task(self.loop_lag.run(), name="loop lag"),
        ]
        stopped = asyncio.create_task(stop.wait(), name="stop")
        try:
            done, _ = await asyncio.wait([stopped, *loops], return_when=asyncio.FIRST_COMPLETED)
            dead = [t for t in loops if t in done]
            if dead and not stop.is_set():
                # A loop that ends by itself (a bug, not Redis: those are retried
                # inside) would leave a process that looks alive and consumes
                # nothing.  Fail loudly instead; the process exits non-zero and
                # its supervisor (Heroku, systemd) starts a fresh one.
                t = dead[0]
                exc = None if t.cancelled() else t.exception()
                raise WorkerLoopDied(f"the worker's {t.get_name()} loop ended: {exc!r}") from exc
        finally:
            stopped.cancel()
            self.stopping = True
            self.ready = False
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await self._drain()
            # what this worker emptied leaves the index now (a thread left in it costs
            # the next sweeper a look at an empty mailbox, nothing more)
            # (each step bounded: a Redis that stopped answering must not hold the
            # process past the platform's kill)
            await bounded(self.delivery.flush_index(), "leaving the active-thread index")
            # and its name leaves the consumer group, if it holds nothing
            await bounded(self.delivery.drop_consumers(self.name), "leaving the consumer group")

    async def _drain(self) -> None:
        if not self.running:
            return
        grace = self.settings.shutdown_grace_secs
        log.info("draining %d running thread(s), up to %.0f s", len(self.running), grace)
        heartbeat = asyncio.create_task(self._heartbeat_forever())
        for guard in self.guards.values():
            guard.stopping.set()  # a turn waiting out a rate limit is handed back now
        try:
            _, pending = await asyncio.wait(list(self.running.values()), timeout=grace)
        finally:
            heartbeat.cancel()
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=3.0)
        # tasks release their own locks in `finally`; anything still held expires by TTL

    async def _with_backoff(self, fn: Callable[[], object], stop: asyncio.Event) -> None:
        delay = 0.2
        while not stop.is_set():
            try:
                res = fn()
                if asyncio.iscoroutine(res):
                    await res
                return
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                log.warning("Redis unavailable (%s); retrying in %.1f s", type(exc).__name__, delay)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                delay = min(delay * 2, 5.0)

    # -- consume -----------------------------------------------------------
    async def _consume(self, stop: asyncio.Event) -> None:
        delay = 0.2
        # Entries delivered to this consumer but not handed off (a read whose reply
        # was lost with the connection, a hand-off that failed) are re-read first,
        # before anything newer, so per-thread order survives Redis hiccups.
        replay_own = True
        # Entries handed off but not yet acknowledged: the acknowledgement (active
        # index ZADD + XACK) rides at the head of the next read's round trip.
        unacked: list[tuple[bytes, InboundEvent | None]] = []
        try:
            while not stop.is_set():
                free = self.settings.worker_concurrency - len(self.running)
                lag_limit = self.settings.worker_busy_lag_ms / 1000
                held = len(self.running)
                busy = held >= max(self.busy_min_running, 1) and self.loop_lag.busy(lag_limit)
                if free <= 0 or busy:
                    if unacked:
                        # not left for the next read: that may be a while away
                        with contextlib.suppress(RedisError, OSError):  # else: next read
                            await self.delivery.acknowledge(unacked)
                            unacked = []
                    paused = time.perf_counter()
                    await asyncio.sleep(0.01)
                    if busy and free > 0:  # held back by the gate, not by the cap
                        self.busy_pauses += 1
                        METRICS.inc(
                            "parley_worker_busy_seconds_total", time.perf_counter() - paused
                        )
                    continue
                try:
                    if replay_own:
                        own = await self.delivery.read_own_pending(self.name, count=100)
                        if own:
                            log.info(
                                "re-reading %d entries this worker had not handed off", len(own)
                            )
                            await self._hand_off(own)
                            unacked = []  # re-handed off and acknowledged just now
                            continue
                        replay_own = False
                    entries = await self.delivery.read(
                        self.name, count=min(free, 100), block_ms=1000, ack_first=unacked
                    )
                    unacked = []
                    if entries:
                        replay_own = True  # if the hand-off fails, re-read these first
                        await self._hand_off(entries, ack=False)
                        unacked = entries
                        replay_own = False
                    delay = 0.2
                except ResponseError as exc:
                    if "NOGROUP" in str(exc):
                        await self.delivery.ensure_group()
                        continue
                    log.exception("unexpected Redis error while consuming")
                    await asyncio.sleep(delay)
                except (RedisError, OSError) as exc:
                    replay_own = True
                    log.warning(
                        "consume: Redis unavailable (%s); retrying in %.1f s",
                        type(exc).__name__,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            if unacked:
                with contextlib.suppress(RedisError, OSError):
                    await self.delivery.acknowledge(unacked)

    async def _hand_off(
        self, entries: list[tuple[bytes, InboundEvent | None]], *, ack: bool = True
    ) -> None:
        bad = [eid for eid, ev in entries if ev is None]
        if bad:
            log.error("dropping %d malformed stream entries %s", len(bad), bad[:5])
        began = await self.delivery.handoff_and_begin(entries, self.owner, ack=ack)
        for thread, state in began:
            self._spawn(thread, state)
        self._note_waiting_presses([ev for _eid, ev in entries], dict(began))

    def _note_waiting_presses(
        self, events: list[InboundEvent | None], began: dict[ThreadKey, TurnState]
    ) -> None:
        """Tell a channel with a ``press_waiting`` hook (agent_core.outbox) about
        each button press that cannot run next: its thread's lock is another
        worker's, or earlier events of the thread come first (a turn running here
        holds its own event at the mailbox's head until it completes)."""
        for ev in events:
            if ev is None or ev.kind != EventKind.ACTION:
                continue
            state = began.get(ev.thread)
            if state is not None and state.mailbox and state.mailbox[0].event_id == ev.event_id:
                continue  # it runs next
            self._press_waiting(ev)

    def _press_waiting(self, event: InboundEvent) -> None:
        hook = getattr(self.agent.outbox_for(event.thread.channel), "press_waiting", None)
        if hook is not None:
            try:
                hook(event)
            except Exception:  # a courtesy: never stop the consume loop over it
                log.debug("[%s] press_waiting failed", event.thread, exc_info=True)

    def _spawn(self, thread: ThreadKey, state: TurnState | None = None) -> None:
        running = self.running.get(thread)
        if running is not None and state is not None and state.lock_was_ours:
            return  # the running task holds the lock and will see the new event
        if running is not None:
            # The thread's task is finishing (its completion released the lock)
            # while a new event for it just took the lock for this worker: run the
            # thread again once that task is gone, or the lock would sit idle
            # until it expires.
            running.add_done_callback(lambda _task: self._respawn(thread))
            return
        guard = LockGuard(owner=self.owner)
        self.guards[thread] = guard
        task = asyncio.create_task(self._run_thread(thread, guard, state), name=f"thread {thread}")
        self.running[thread] = task

    async def _waits_for_earlier(self, thread: ThreadKey, state: TurnState) -> bool | None:
        """Is an earlier arrival of this thread still on its way (read by a worker
        that died before handing it off)?  Then wait for it, up to a bound; past
        the bound run what is here and let the late one follow.  None: one turned up
        right at the bound (before the head): begin again, it runs first."""
        head = state.mailbox[0]
        expected = state.next_seq or 1
        if not head.seq or head.seq <= expected:
            return False
        waited = time.time() - head.received_at
        if waited < self.gap_wait:
            log.info(
                "[%s] event %s (arrival %d) waits for arrival %d (%.1f s so far)",
                thread,
                head.event_id,
                head.seq,
                expected,
                waited,
            )
            return True
        log.warning(
            "[%s] arrival %d never turned up within %.0f s; running %d",
            thread,
            expected,
            self.gap_wait,
            head.seq,
        )
        if not await self.delivery.skip_gap(thread, head, self.owner):
            # a late arrival went before it just now: it runs first (a new begin)
            log.info("[%s] arrival before %d turned up at the deadline", thread, head.seq)
            return None
        return False

    async def _forward(self, thread: ThreadKey, state: TurnState) -> int:
        """The conversation moved (see agent_core.agent.move): hand this thread's
        events to the thread it moved to, in their order, after what waits there
        (idempotent there on event id); the mailbox length left here."""
        target = state.moved_to
        assert target is not None
        log.info(
            "[%s] conversation moved to %s; forwarding %d event(s)",
            thread,
            target,
            len(state.mailbox),
        )
        moved: list[tuple[bytes, InboundEvent | None]] = [
            (b"", dataclasses.replace(ev, thread=target, seq=0)) for ev in state.mailbox
        ]
        # an event cut off mid-answer here carries the parts it sent (see carry_sent)
        await self.delivery.carry_sent(state, target)
        ready = await self.delivery.handoff_and_begin(moved, self.owner, ack=False)
        left = await self.delivery.complete(
            thread,
            self.owner,
            consumed=state.mailbox,
            session_json=None,
            version=state.session_version,
            sent_fields=[],
            next_seq=_next_after(state.mailbox),
        )
        for t, st in ready:
            self._spawn(t, st)
        self._note_waiting_presses([ev for _b, ev in moved], dict(ready))
        return left

    async def _ended(self, thread: ThreadKey, left: int) -> bool | None:
        """After a completion that ran no turn: None while events are left to run;
        else whether the lock was released (0: mailbox empty, -1 or below: not ours)."""
        if left > 0:
            return None
        if left == 0:
            await self.delivery.deactivate(thread)
        return left == 0

    def _respawn(self, thread: ThreadKey) -> None:
        if not self.stopping and thread not in self.running:
            self._spawn(thread)

    # -- a thread ----------------------------------------------------------
    async def _run_thread(
        self, thread: ThreadKey, guard: LockGuard, first: TurnState | None = None
    ) -> None:
        released = False
        try:
            while True:
                # The hand-off script read the first turn's state already.
                state, first = first or await self.delivery.begin(thread, self.owner), None
                if not state.mailbox:
                    await self.delivery.release(thread, self.owner)
                    released = True
                    await self.delivery.deactivate(thread)
                    return
                if state.moved_to is not None and state.moved_to != thread:
                    ended = await self._ended(thread, await self._forward(thread, state))
                    if ended is not None:
                        released = ended
                        return
                    continue
                waits = await self._waits_for_earlier(thread, state)
                if waits is None:
                    continue
                if waits:
                    if state.mailbox[0].kind == EventKind.ACTION:
                        self._press_waiting(state.mailbox[0])
                    await self.delivery.release(thread, self.owner)
                    released = True  # the sweeper or the missing event's hand-off resumes it
                    return
                started = time.perf_counter()
                guard.wait_until = 0.0  # (a wait an earlier turn's timeout cut short)
                try:
                    result = await self.recovery.run_turn(thread, state, guard)
                except LockLost:
                    released = True  # not ours any more
                    return
                except asyncio.CancelledError:
                    raise
                except (SendRateLimited, TurnHandedBack) as exc:
                    # The platform asks to wait (and the reply writer could not, or the
                    # worker is stopping): the answer is not thrown away.  The message
                    # stays queued and the thread is handed back for the wait, then
                    # run again (parts already shown are edited, never sent twice).
                    hold = min(max(exc.retry_after, 1.0), HAND_BACK_MAX_SECS)
                    log.warning(
                        "[%s] turn on event %s handed back for %.0f s: %s",
                        thread,
                        state.mailbox[0].event_id,
                        hold,
                        exc,
                    )
                    await self._take_back_unsent(thread, guard)
                    with contextlib.suppress(RedisError, OSError):
                        await asyncio.shield(self.delivery.release(thread, self.owner, hold))
                    released = True
                    return
                except (RedisConnectionError, RedisTimeoutError) as exc:
                    # Redis went away mid-turn: the message stays in the mailbox and
                    # the sweeper runs it again once Redis is back (never skipped).
                    log.warning(
                        "[%s] Redis unavailable during the turn on event %s (%s); "
                        "it stays queued and will be retried",
                        thread,
                        state.mailbox[0].event_id,
                        type(exc).__name__,
                    )
                    return
                except Exception as exc:
                    refused = forbidden(exc)
                    if refused is not None:  # no traceback, no notice (refused too)
                        log.warning(
                            "[%s] turn on event %s skipped: the bot may not post there: %s",
                            thread,
                            state.mailbox[0].event_id,
                            refused,
                        )
                    else:
                        log.exception(
                            "[%s] turn failed on event %s; skipping it",
                            thread,
                            state.mailbox[0].event_id,
                        )
                    told = await self.recovery.tell_failed(thread, state, guard, exc)
                    # every record of the skipped message goes with it (the parts it
                    # had sent too), or they would stay in the thread's hash for good
                    told += await self.delivery.records_of(thread, state.mailbox[0].event_id)
                    left = await self.delivery.complete(
                        thread,
                        self.owner,
                        consumed=state.mailbox[:1],
                        session_json=None,
                        version=state.session_version,
                        sent_fields=sorted(set(told)),
                        next_seq=_next_after(state.mailbox[:1]),
                    )
                    ended = await self._ended(thread, left)
                    if ended is not None:
                        released = ended
                        return
                    continue
                sent_fields = result.sent_fields
                try:
                    session_json = result.session.to_json() if result.save_session else None
                except Exception:
                    # A session that cannot be saved (text that is not valid Unicode, a
                    # bug) fails the same way every time: the turn's messages are done
                    # all the same (their answers went out), the session stays as it
                    # was, and the person is told; not a crash of this task rerunning
                    # the messages for good.
                    log.exception(
                        "[%s] the session after event %s could not be saved; its %d "
                        "message(s) are done without it",
                        thread,
                        state.mailbox[0].event_id,
                        result.consumed,
                    )
                    session_json = None
                    told = await self.recovery.tell_unsaved(thread, state, guard)
                    sent_fields = sorted(set(sent_fields) | set(told))
                left = await self.delivery.complete(
                    thread,
                    self.owner,
                    consumed=state.mailbox[: result.consumed],
                    session_json=session_json,
                    version=state.session_version,
                    sent_fields=sent_fields,
                    with_calls=result.completion_calls,
                    next_seq=_next_after(state.mailbox[: result.consumed]),
                )
                self.turns_done += 1
                elapsed = time.perf_counter() - started
                METRICS.inc("parley_turns_total", outcome=result.outcome.split(":")[0])
                METRICS.observe("parley_turn_seconds", elapsed)
                if self.on_turn is not None:
                    self.on_turn(thread, result.outcome, time.perf_counter() - started)
                if left == -1:
                    log.warning(
                        "[%s] lock lost before completion; another worker reruns it", thread
                    )
                    released = True
                    return
                if left == -2:
                    log.error(
                        "[%s] session changed under the lock (version conflict); rerunning", thread
                    )
                    continue
                if left == 0:
                    released = True
                    # out of the active index in the next round trip sent anyway
                    self.delivery.leave_index_later(thread)
                    return
        except asyncio.CancelledError:
            log.info("[%s] turn cancelled (shutdown); its message stays queued", thread)
            raise
        except (RedisError, OSError) as exc:
            log.warning(
                "[%s] Redis error in thread task (%s); lock will expire", thread, type(exc).__name__
            )
        finally:
            try:
                await self._take_back_unsent(thread, guard)
            finally:
                if not released:
                    # let go of the thread (shutdown, Redis trouble) without counting
                    # this execution as interrupted: the next one is a plain rerun.
                    # Before the task leaves ``running``: a hand-off meanwhile finds the
                    # lock ours and the task still running, and starts no second one.
                    # Cancelled while it waited for the platform: held back as long.
                    hold = min(max(guard.wait_until - time.monotonic(), 0.0), HAND_BACK_MAX_SECS)
                    with contextlib.suppress(Exception):
                        await asyncio.shield(self.delivery.release(thread, self.owner, hold))
                self.running.pop(thread, None)
                self.guards.pop(thread, None)

    async def _take_back_unsent(self, thread: ThreadKey, guard: LockGuard) -> None:
        """Claims of reply parts that never left, which the turn could not take back
        (Redis trouble; ``LockGuard.unsent``): taken back before the thread is let
        go, so its rerun sends those parts rather than taking them for maybe sent.
        What still fails is left to the sweeper, tried again once Redis answers
        (a rerun waits ``ReplyWriter.part_wait_secs`` for such a claim to go)."""
        if not guard.unsent:
            return
        self._unsent.extend((thread, f, m) for f, m in guard.unsent)
        guard.unsent.clear()
        # bounded like the release after it: a Redis that does not answer holds no one
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            await asyncio.shield(asyncio.wait_for(self._retry_unsent(), 2.0))

    async def _retry_unsent(self) -> None:
        for item in list(self._unsent):
            thread, part, marker = item
            await self.delivery.unclaim_part(thread, part, marker)  # exactly that claim
            with contextlib.suppress(ValueError):
                self._unsent.remove(item)
            log.info("[%s] claim of part %s (never sent) taken back", thread, part)

    # -- heartbeat and sweeper ---------------------------------------------
    async def _renew_once(self) -> None:
        held = list(self.guards)
        if not held:
            return
        ok = await self.delivery.renew(held, self.owner)
        for thread, renewed in zip(held, ok, strict=True):
            if not renewed and thread in self.guards:
                log.warning("[%s] lock lost (renewal refused)", thread)
                self.guards[thread].lost = True

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        await self._heartbeat_forever()

    async def _heartbeat_forever(self) -> None:
        interval = self.settings.lock_ttl_secs / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self._renew_once()
            except (RedisError, OSError) as exc:
                log.warning("heartbeat: Redis unavailable (%s)", type(exc).__name__)

    async def sweep_once(self) -> int:
        """Reclaim orphaned stream entries and run orphaned threads; return how many."""
        n = 0
        # claims of sends that never left, still there; a claim that cannot be taken
        # back now never keeps the sweep from its own work (tried again next tick)
        with contextlib.suppress(RedisError):
            await self._retry_unsent()
        # threads this worker emptied that no other round trip has taken out of the
        # index yet (an idle worker): first, so the scan below does not pick them up
        await self.delivery.flush_index()
        entries = await self.delivery.reclaim(
            self.name, min_idle_ms=int(self.settings.reclaim_idle_secs * 1000)
        )
        if entries:
            self.reclaimed += len(entries)
            METRICS.inc("parley_reclaims_total", len(entries))
            log.info("reclaimed %d stream entries from dead consumers", len(entries))
            await self._hand_off(entries)
            n += len(entries)
        # every thread of the index, not the oldest few: one queued behind hundreds
        # that live workers hold must not wait for them to finish
        orphans = await self.delivery.unlocked_active(
            lambda t: t in self.running or self.delivery.leaving_index(t)
        )
        for thread in orphans:
            if len(self.running) >= self.settings.worker_concurrency:
                break
            if thread in self.running or self.delivery.leaving_index(thread):
                continue  # emptied by this worker since the flush above
            if await self.delivery.try_lock(thread, self.owner):
                self._spawn(thread)
                n += 1
        # Housekeeping last: recovery above never waits on it, nor fails with it.
        try:
            await self.delivery.trim_acked()  # the inbox keeps only what is unfinished
            if time.monotonic() >= self._next_consumer_sweep:
                # names of processes gone for 10 minutes that hold nothing
                self._next_consumer_sweep = time.monotonic() + 60.0
                await self.delivery.drop_consumers()
        except ResponseError as exc:
            log.warning("sweeper: inbox housekeeping refused: %s", exc)
        return n

    async def _sweep(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.sweep_once()
            except (RedisError, OSError) as exc:
                log.warning("sweeper: Redis unavailable (%s)", type(exc).__name__)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.sweep_interval_secs)
