"""What a running turn checks between loop iterations: messages that arrived for
its thread (taken in, in order) and ``/interrupt`` (the flag, or the command
itself queued in the mailbox).

Methods of :class:`agent_core.agent.turn.Turn`, bound there (as
``turn_approvals`` is).  Two rules keep every message delivered once:

* a queued ``/stop`` (``/interrupt``) stops only a turn that was already running
  when it arrived: one that was waiting in the mailbox when the turn began was
  sent for an earlier turn (or while nothing ran) and waits for its own turn,
  where it says what it did;
* a stop never throws away messages taken in: the mailbox entries before the
  ``/stop`` are left there, uncounted, for turns of their own, and held messages
  already taken out of the session (``pending_inject``) are kept in the history.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from agent_core.agent.interrupt import flag_is_newer, flag_user, is_interrupt
from agent_core.agent.loop import Signals
from agent_core.agent.parser import is_command
from agent_core.agent.session import mid_turn
from agent_core.agent.turn_approvals import Interrupted
from agent_core.events import SYNTHETIC_PREFIXES, EventKind, InboundEvent
from agent_core.store import keys

if TYPE_CHECKING:
    from agent_core.agent.turn import Turn

# An album's items come as separate events: the first model call waits until none
# has arrived for BATCH_QUIET seconds (at most BATCH_MAX after the first item).
BATCH_QUIET = 0.5
BATCH_MAX = 3.0


async def check_signals(self: Turn) -> Signals:
    """Inject plain messages that arrived for this thread since the turn began."""
    signals = Signals()
    if self.guard.lost:
        signals.stop = "lock-lost"
        return signals
    signals.injected.extend(self.pending_inject)
    self.pending_inject = []
    first, self._checked_signals = not self._checked_signals, True
    if first:
        self.note_running()
        if self.handed_back_ms:
            await stop_if_stopped_while_held(self, signals)
    if not self.inject:
        return signals
    arrived = self.state.mailbox[self.consumed :]
    if not arrived and not first:  # the first check uses the mailbox just read
        async with self.agent.redis.pipeline(transaction=False) as pipe:
            pipe.lrange(keys.mailbox(self.thread), self.consumed, -1)
            pipe.get(keys.interrupt(self.thread))
            raw, flag = await pipe.execute()
        arrived = [InboundEvent.from_json(r) for r in raw]
        self.state.mailbox.extend(arrived)
        if flag_is_newer(flag, self.watch_from_ms, self.may_stop):
            stop_keeping(self, signals, flag_user(flag))
    if first and self.head is not None and self.head.batch:
        arrived = [*arrived, *await rest_of_batch(self, self.head, arrived)]
    # First what can be taken in, with no side effect; then take it in.  A /stop
    # met on the way stops the turn with nothing taken from the mailbox.
    last = max((e.seq for e in self.state.mailbox[: self.consumed]), default=0)
    if not last and self.state.next_seq:  # a head with no number (forwarded, held)
        last = self.state.next_seq - 1  # the order still holds for what comes after it
    take: list[InboundEvent] = []
    for ev in arrived:
        if ev.seq and last and ev.seq != last + 1:
            break  # an earlier arrival is still on its way: keep the order
        last = ev.seq or last
        synthetic = ev.event_id.startswith(SYNTHETIC_PREFIXES)
        if ev.kind in (EventKind.ACTION, EventKind.MOVED) or synthetic or is_command(ev.text):
            if (
                ev.kind != EventKind.ACTION
                and not synthetic
                and is_interrupt(ev.text)
                and ev.event_id not in self.queued_at_start
                and self.may_stop(ev.qualified_user)
            ):
                stop_keeping(self, signals, ev.qualified_user)
            # commands, button presses, moves and routine runs wait for their own turn
            # (a /stop queued before this turn began too: it was not meant for it)
            break
        if self.user and ev.qualified_user != self.user:
            # another person's message gets a turn of its own: tools act for the
            # person who asked (their notes, budget, approvals), never for this one
            break
        take.append(ev)
    for ev in take:
        if self.agent.access.needs_redis(ev):
            verdict = await self.agent.access.check(ev)
            if not verdict.allowed:
                self.consumed += 1
                if verdict.notice:
                    await self.say_notice(verdict.notice, refusal=True)
                continue
        signals.injected.append(mid_turn(await self.user_message(ev)))  # this turn's
        self.consumed += 1
    return signals


async def stop_if_stopped_while_held(self: Turn, signals: Signals) -> None:
    """The turn reruns a message whose earlier execution was handed back for a
    platform's wait (the thread held meanwhile): an ``/interrupt`` its person (or
    an approver) sent since then stops it before the model is asked again.  Seen
    by its flag (set by ``interrupt_filter`` while the thread was held, living as
    long as the hold and 10 minutes more) or, the flag gone all the same, by the
    command queued in the mailbox since the hand-back."""
    since = self.handed_back_ms
    for ev in self.state.mailbox[1:]:
        if (
            ev.kind != EventKind.ACTION
            and is_interrupt(ev.text)
            and ev.received_at * 1000 >= since
            and self.may_stop(ev.qualified_user)
        ):
            stop_keeping(self, signals, ev.qualified_user)
    raw = await self.agent.redis.get(keys.interrupt(self.thread))
    flag = raw if isinstance(raw, bytes) else None
    if flag_is_newer(flag, since, self.may_stop):
        stop_keeping(self, signals, flag_user(flag))


def stop_keeping(self: Turn, signals: Signals, by: str) -> None:
    """Stop the turn (raise :class:`Interrupted`) for ``by``'s /interrupt.  What
    ``signals`` already took in (the messages held during an approval) goes into
    the history first: it was taken out of the session and must not vanish."""
    if signals.injected:
        self.session.history.extend(signals.injected)
        self.kept_unanswered = any(m.role == "user" for m in signals.injected)
        signals.injected = []
    self.stopped_by = by
    raise Interrupted()


async def rest_of_batch(
    self: Turn, head: InboundEvent, arrived: list[InboundEvent]
) -> list[InboundEvent]:
    """Wait for the other items of ``head``'s batch (an album) so the first model
    call sees them all: until none came for BATCH_QUIET s, at most BATCH_MAX s
    after the first.  Costs nothing once the batch is already complete."""
    batch = head.batch
    last = max(e.received_at for e in (head, *arrived) if e.batch == batch)
    now = time.time()
    # received_at comes from the web process's clock: bound the wait by ours too
    until = min(head.received_at, now) + BATCH_MAX
    more: list[InboundEvent] = []
    while True:
        wait = min(last + BATCH_QUIET, until) - now
        if wait <= 0:
            return more
        await asyncio.sleep(wait)
        now = time.time()
        start = len(self.state.mailbox)
        raw = await self.agent.redis.lrange(keys.mailbox(self.thread), start, -1)
        new = [InboundEvent.from_json(r) for r in raw]
        self.state.mailbox.extend(new)
        more += new
        last = max([last, *(e.received_at for e in new if e.batch == batch)])
