"""Sending a turn's replies exactly once, streaming included.

Every message a turn sends is a numbered *part* of the event that caused it.
Right after a part reaches the platform its MessageRef is recorded in Redis
(``{thread}:sent``, field ``<event_id>:<n>``).  If the turn is run again
(crash and rerun, stream redelivery), a part already recorded is *edited* to
the new text instead of sent again, so the user never sees a second reply.

Two executions of one turn can overlap (a worker stalled past its lock TTL
while another took the thread over).  So a new part is first *claimed* in Redis
by a script that also checks the thread lock: only the lock holder can claim,
and a part already claimed by the other execution is waited for and then
edited, never sent a second time.  A turn whose lock was lost stops before
sending anything more (LockLost).  Edits are not fenced (one Redis round trip
each would be too many while streaming): a stale execution can at worst edit a
message of this same turn, never add one.

A platform that asks to wait (SendRateLimited: a 429 the channel did not wait
out itself) is waited out and the send or edit made again, for as long as the
platform keeps asking: the answer is never thrown away for it.  Only the
droppable edits of a streamed preview are skipped instead.  The wait is off the
turn's clock (``agent_core.deadline``), /interrupt ends it (the turn's
``interruptible``), and so does the worker stopping: the turn is then handed
back (TurnHandedBack), its message stays queued for once the wait is over.
A send or edit refused part-way through an answer of several platform messages
carries the messages now out (``ChannelError.partial_ref``): they are recorded as
the part, and the send or edit is made again from them, so none is sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from redis.exceptions import RedisError

from agent_core.deadline import MAX_PLATFORM_WAIT_SECS, held, waited
from agent_core.errors import (
    ChannelError,
    LockLost,
    SendRateLimited,
    SendUnconfirmed,
    TurnHandedBack,
)
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.outbox import (
    Outbox,
    WireClaim,
    reset_current_part,
    reset_on_wire,
    set_current_part,
    set_on_wire,
    watch_skips,
    wire_refused,
    wire_shown,
    wire_unsent,
)
from agent_core.store.delivery import Delivery, claim_stamp, claim_time

log = logging.getLogger(__name__)

# What a part left over from an earlier execution of a turn is edited to, on a
# channel that cannot delete messages (the answer is the message above it).
RETIRED_NOTE = "(an earlier draft of the answer above)"


@dataclass
class LockGuard:
    """Flipped by the worker's heartbeat when the thread lock is lost."""

    lost: bool = False
    owner: str = ""  # the lock owner token ('' = unfenced, for tests without a worker)
    # (part, claim marker) of sends that never left and whose claim could not be
    # taken back (Redis trouble): the worker takes them back before letting the
    # thread go, or its sweeper once Redis answers (a rerun waits for them)
    unsent: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # set by the worker when it stops: a wait for a platform's rate limit ends at
    # once and the turn is handed back (ReplyWriter, TurnHandedBack)
    stopping: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    # until when (time.monotonic()) the turn waits for the platform (0: it does
    # not): a turn cancelled meanwhile is handed back for what is left of it
    wait_until: float = 0.0

    def check(self) -> None:
        if self.lost:
            raise LockLost("thread lock lost; another worker owns this thread now")


class _PartExists(Exception):
    """The part was claimed by another execution of this turn (ref if sent)."""

    def __init__(self, ref: MessageRef | None) -> None:
        super().__init__("reply part already claimed")
        self.ref = ref


class ReplyWriter:
    part_wait_secs = 15.0  # how long a part another execution claimed is waited for
    rate_limit_min_wait = 1.0  # the least a SendRateLimited is waited (a Retry-After of 0)
    # the most a turn waits for the platform in all (its own waits and its sender's,
    # agent_core.deadline.waited): a wait past it hands the turn back instead
    max_platform_wait = MAX_PLATFORM_WAIT_SECS

    def __init__(
        self,
        outbox: Outbox,
        delivery: Delivery,
        thread: ThreadKey,
        event_id: str,
        sent: dict[str, MessageRef],
        guard: LockGuard,
        reply_to: MessageRef | None = None,
        pending: Mapping[str, str] | None = None,
    ) -> None:
        self.outbox = outbox
        self.delivery = delivery
        self.thread = thread
        self.event_id = event_id
        self.sent = sent
        self.guard = guard
        self.reply_to = reply_to
        self.parts = 0
        self.fields: list[str] = []  # sent-record fields this turn wrote or reused
        # parts claimed by an earlier execution and never recorded -> their claim marker
        self.pending: dict[str, str] = dict(pending or {})
        # pending parts found missing on the platform -> the dead claim this one replaces
        self.taken_over: dict[str, str] = {}
        # runs a rate-limit wait so that /interrupt ends it (the turn's
        # ``interruptible``, set by Turn); None: a plain wait
        self.waiter: Callable[[Awaitable[bool]], Awaitable[bool]] | None = None
        # a stop during a rate-limit wait: hand the turn back (TurnHandedBack), or
        # (False: a recovery notice) let the send fail with its SendRateLimited
        self.hand_back = True
        self.patient = True  # False once a wait failed (/interrupt): no more waits
        self._partly_shown: set[str] = set()  # parts a 429 cut after their first message
        self.waited = 0.0  # seconds this writer waited for the platform

    async def say(self, message: OutboundMessage) -> MessageRef:
        """Send a new part (or converge the recorded one on a rerun)."""
        field = f"{self.event_id}:{self.parts}"
        self.parts += 1
        self.fields.append(field)
        self.guard.check()
        known = self.sent.get(field)
        if known is None and field in self.pending and not self._may_resend():
            known = await self._find_or_wait(field)
        while True:
            try:
                if known is not None:
                    return await self._converge(field, known, message)
                return await self._send_new(field, message)
            except SendRateLimited as exc:
                if field in self._partly_shown:
                    raise  # partly on screen: never sent again (its claim stays)
                await self._wait_out(exc, field)
                known = self.sent.get(field, known)

    async def _wait_out(self, exc: SendRateLimited, what: str) -> None:
        """The platform asked to wait before ``what`` (a part, an edit) is tried
        again: wait ``exc.retry_after`` (at least ``rate_limit_min_wait``), off the
        turn's clock.  Raises ``exc`` again if no more waits are to be made (an
        /interrupt ended one); /interrupt or a lost lock during the wait raises
        what the turn's ``interruptible`` does; the worker stopping raises
        TurnHandedBack (or ``exc``, without ``hand_back``), before or during it.
        A wait that would take the turn past ``max_platform_wait`` of waiting in
        all (a platform that keeps answering 429) is not made: the turn is handed
        back the same way, freeing the worker, and its message answered after it."""
        if not self.patient:
            raise exc
        secs = max(exc.retry_after, self.rate_limit_min_wait)
        stopping = self.guard.stopping
        if stopping.is_set():
            self._give_way(exc, secs)
        spent = max(self.waited, waited())
        if spent + secs > self.max_platform_wait:
            log.warning(
                "[%s] %s: the platform asks to wait %.1f s more after %.1f s of waits; "
                "handing the turn back for it",
                self.thread,
                what,
                secs,
                spent,
            )
            self._give_way(exc, secs)
        log.info(
            "[%s] %s: the platform asks to wait %.1f s (%s); sending it then",
            self.thread,
            what,
            secs,
            exc,
        )

        async def pause() -> bool:
            """True if the worker began to stop during the wait."""
            stop = asyncio.ensure_future(stopping.wait())
            try:
                done, _ = await asyncio.wait({stop}, timeout=secs)
            finally:
                stop.cancel()
            return bool(done)

        until = time.monotonic() + secs
        self.guard.wait_until = until
        try:
            with held(secs):
                stopped = await (pause() if self.waiter is None else self.waiter(pause()))
        except asyncio.CancelledError:
            raise  # (wait_until stays: the worker hands the thread back for the rest)
        except Exception:
            self.guard.wait_until = 0.0
            self.patient = False  # /interrupt, a lost lock: the turn ends without waiting
            raise
        finally:
            self.waited += secs - max(until - time.monotonic(), 0.0)
        self.guard.wait_until = 0.0
        if stopped:
            self._give_way(exc, until - time.monotonic())
        self.guard.check()

    def _give_way(self, exc: SendRateLimited, left: float) -> None:
        """The worker is stopping: the turn stops too, handed back for later."""
        self.patient = False
        if self.hand_back:
            raise TurnHandedBack(max(left, self.rate_limit_min_wait)) from exc
        raise exc

    async def _find_or_wait(self, field: str) -> MessageRef | None:
        """A part an earlier execution claimed and never recorded (it died, or
        stalled, around the platform request).  A channel that can look its
        messages up (``Outbox.find_part``) says whether the part is showing: its
        ref (recorded now; the rerun edits it), or None (it never arrived: sent
        now, over the dead claim).  Otherwise, or if the look-up fails, the part
        is waited for and then taken for maybe sent (:meth:`_wait_for_part`)."""
        find = getattr(self.outbox, "find_part", None)
        if find is not None:
            try:
                claimed_ms = claim_time(self.pending[field])
                found: MessageRef | None = await find(
                    self.thread, field, claimed_ms, reply_to=self.reply_to
                )
            except ChannelError as exc:
                log.warning("[%s] could not look part %s up: %s", self.thread, field, exc)
            else:
                if found is None:
                    log.info("[%s] part %s never arrived; sending it", self.thread, field)
                    self.taken_over[field] = self.pending[field]
                    return None
                log.info("[%s] part %s found on the platform", self.thread, field)
                self.guard.check()  # the look-up may have waited: record only as the holder
                await self.delivery.record_sent(self.thread, field, found)
                return found
        return await self._wait_for_part(field)

    async def _send_new(
        self, field: str, message: OutboundMessage, *, again: bool = True
    ) -> MessageRef:
        """Claim ``field`` and send it (``again``: if another execution's claim is
        in the way and then given back, claim once more and send)."""
        early = ""  # the marker of a claim made before the request (no wire hook)
        if self.guard.owner and not getattr(self.outbox, "wire_hook", False):
            try:
                stamp = claim_stamp()
                await self._claim(field, stamp=stamp)  # no hook: claim before sending
                early = f"pending:{stamp}"
            except _PartExists as exc:
                return await self._existing(field, exc, message, again=again)
        token = None
        stamp = ""
        if self.guard.owner and getattr(self.outbox, "wire_hook", False):
            stamp = claim_stamp()  # one marker for every claim of this send
            token = set_on_wire(
                lambda: self._claim(field, stamp=stamp), self._wire_claim(field, stamp=stamp)
            )
        part_token = set_current_part(field)
        try:
            ref = await self.outbox.send(self.thread, message, reply_to=self.reply_to)
        except SendUnconfirmed as exc:
            # The request left and no answer came back: the platform may have
            # shown it.  Record the part as sent with an unknown id (never
            # repeated, never edited); see StreamingReply.finish for previews.
            log.warning(
                "[%s] part %s unconfirmed (%s); not sending it again", self.thread, field, exc
            )
            ref = self._unknown()
        except _PartExists as exc:
            return await self._existing(field, exc, message, again=again)
        except RedisError:
            if token is not None and wire_unsent():
                # It never left (the pacing booking that carried its claim failed):
                # a claim left behind would make the rerun take it for maybe sent.
                await self._take_back_unsent(field, f"pending:{stamp}")
            raise
        except ChannelError as exc:
            if exc.partial_ref is not None:
                # Part of it is out (an answer of several messages, refused after
                # the first): recorded as the part, which is then edited to the
                # whole text (after the wait), never sent again.
                await self._record_partial(field, exc.partial_ref)
            elif isinstance(exc, SendRateLimited):
                if wire_shown():
                    self._partly_shown.add(field)
                elif early:  # to be sent again after the wait: claimed again then
                    await self._take_back_unsent(field, early)
            # Refused (or never sent) and nothing of it showing: give the claim
            # back, so a rerun after a crash sends the part rather than waiting
            # for it and taking it for maybe sent.
            try:
                await wire_refused()
            except RedisError as exc:
                log.warning("[%s] could not unclaim part %s: %s", self.thread, field, exc)
            raise
        finally:
            reset_current_part(part_token)
            if token is not None:
                reset_on_wire(token)
        self.sent[field] = ref
        await self.delivery.record_sent(self.thread, field, ref)
        return ref

    async def _record_partial(self, field: str, ref: MessageRef) -> None:
        """Record the messages a send refused part-way left showing as ``field``."""
        self.sent[field] = ref
        try:
            await self.delivery.record_sent(self.thread, field, ref)
        except RedisError as exc:  # the claim stays: a rerun takes it for maybe sent
            log.warning("[%s] could not record part %s as sent: %s", self.thread, field, exc)

    async def _take_back_unsent(self, field: str, marker: str) -> None:
        """Take back the claim of a send that never left (if it was made, and is
        still exactly this send's); if Redis does not answer, the worker does it
        later (``LockGuard.unsent``)."""
        try:
            await self.delivery.unclaim_part(self.thread, field, marker)
        except RedisError as exc:
            log.warning(
                "[%s] part %s never left; its claim is taken back later (%s)",
                self.thread,
                field,
                type(exc).__name__,
            )
            self.guard.unsent.append((field, marker))

    def _unknown(self) -> MessageRef:
        """A part that may be showing under an id we do not know (never edited)."""
        return MessageRef(self.thread.channel, self.thread.conversation, "")

    async def _existing(
        self, field: str, exc: _PartExists, message: OutboundMessage, *, again: bool
    ) -> MessageRef:
        """The claim found ``field`` taken by another execution of this turn."""
        ref = exc.ref if exc.ref is not None else await self._wait_for_part(field)
        if ref is not None:
            return await self._converge(field, ref, message)
        if again:
            # The other execution gave its claim back (refused, or waiting to repeat
            # its request; it claims again before it does): claim it here and send.
            return await self._send_new(field, message, again=False)
        return self._unknown()

    async def _converge(
        self, field: str, known: MessageRef, message: OutboundMessage
    ) -> MessageRef:
        log.info("[%s] part %s already sent; editing it instead", self.thread, field)
        self.sent[field] = known
        if not known.message_id:
            return known
        try:
            return await self._edited(field, known, await self.outbox.edit(known, message))
        except ChannelError as exc:
            if exc.partial_ref is not None:  # refused part-way: record what is out
                exc.partial_ref = await self._edited(field, known, exc.partial_ref)
            raise

    async def _edited(self, field: str | None, old: MessageRef, new: MessageRef) -> MessageRef:
        """Record a part whose edit changed the messages it occupies (a long answer
        grew into more messages, or shrank): a rerun must converge on every message
        it shows, not send the extra ones again.  Other ref changes (a channel's
        content fingerprints) are not worth a round trip."""
        if field is None:
            field = next((f for f, r in self.sent.items() if r == old), None)
        if field is None or new == old:
            return new
        self.sent[field] = new
        if self._ids(new) != self._ids(old):
            try:
                await self.delivery.record_sent(self.thread, field, new)
            except RedisError as exc:  # the answer is out; a rerun may repeat the extra
                log.warning("[%s] could not record part %s again: %s", self.thread, field, exc)
        return new

    def _ids(self, ref: MessageRef) -> tuple[str, ...]:
        """The platform messages ``ref`` stands for (``Outbox.message_ids`` if the
        channel has it, else the whole ref)."""
        ids = getattr(self.outbox, "message_ids", None)
        return tuple(ids(ref)) if callable(ids) else (ref.message_id, ref.extra)

    def _may_resend(self) -> bool:
        """Whether a part another execution claimed and never recorded may be sent
        (again) rather than waited for: the channel shows a part once however often
        it is sent (``idempotent_parts``: the local channels)."""
        return bool(getattr(self.outbox, "idempotent_parts", False))

    async def _claim(self, field: str, *, stamp: str | None = None) -> None:
        """Fenced claim of ``field`` right before it goes on the wire.

        ``stamp``: this send's claim marker, the same for every claim of one send
        (an early one a pacer made and could not take back is then this send's
        own, not another's).  A part another execution is sending (or died
        sending) is sent all the same where :meth:`_may_resend` allows, and one
        found missing on the platform (``taken_over``) is claimed over its dead claim.
        """
        self._settle(
            *await self.delivery.claim_part(
                self.thread,
                self.guard.owner,
                field,
                stamp=stamp,
                replace=self.taken_over.get(field, ""),
            )
        )

    def _wire_claim(self, field: str, *, stamp: str) -> WireClaim:
        """The same claim as a script call, for a channel's pacer to send early."""
        call, marker = self.delivery.claim_call(
            self.thread,
            self.guard.owner,
            field,
            stamp=stamp,
            replace=self.taken_over.get(field, ""),
        )
        return WireClaim(
            call=call,
            settle=lambda raw: self._settle(*self.delivery.claim_result(raw)),
            release=lambda: self.delivery.unclaim_part(self.thread, field, marker),
        )

    def _settle(self, code: int, known: MessageRef | None) -> None:
        """What a claim's answer means: go on (claimed), or raise."""
        if code == -1:
            self.guard.lost = True
            self.guard.check()
        if code == 1 or (code == 2 and not self._may_resend()):
            raise _PartExists(known)

    async def _wait_for_part(self, field: str) -> MessageRef | None:
        """Another execution of this turn claimed ``field``: wait for its ref.

        If none appears (that execution died during the platform request), the
        part is *not* sent again: it most likely reached the user, and a second
        copy is what this design exists to prevent.  The answer is then a ref
        with no message id (later edits of it are skipped).  None: the claim is
        gone, the part may be sent.
        """
        deadline = time.monotonic() + self.part_wait_secs
        while time.monotonic() < deadline:
            got = await self.delivery.sent_ref(self.thread, field)
            if isinstance(got, MessageRef):
                return got
            if got is None:
                return None
            await asyncio.sleep(0.2)
        log.warning(
            "[%s] part %s was on the wire when its worker died; not sending it twice",
            self.thread,
            field,
        )
        return self._unknown()

    async def edit(
        self, ref: MessageRef, message: OutboundMessage, *, droppable: bool = False
    ) -> MessageRef:
        """Edit a part; one the platform asks to wait for is waited out and made
        again, unless ``droppable`` (a streamed preview's: SendRateLimited raised)."""
        while True:
            self.guard.check()
            if not ref.message_id:
                return ref  # a part whose sender died mid-request: nothing to edit
            try:
                return await self._edited(None, ref, await self.outbox.edit(ref, message))
            except ChannelError as exc:
                if exc.partial_ref is not None:
                    # Refused part-way through an answer of several messages: what
                    # is out now is the part (recorded), and the edit is made again
                    # from it, so the messages already sent are not sent twice.
                    ref = exc.partial_ref = await self._edited(None, ref, exc.partial_ref)
                if droppable or not isinstance(exc, SendRateLimited):
                    raise
                await self._wait_out(exc, f"edit of {ref.message_id}")

    def stream(self) -> StreamingReply:
        return StreamingReply(self)

    async def retire_rest(self, recorded: Iterable[str]) -> None:
        """The turn is over: parts of its event that an earlier execution recorded
        (or claimed) beyond the ones this one wrote are an answer this execution
        did not give (a rerun whose model answered in fewer parts).  Each is
        deleted on the platform (``Outbox.delete`` where the channel has it, else
        edited to a short note) and its field joins :attr:`fields`, so the
        completion removes its record.  Never raises but LockLost."""
        prefix = f"{self.event_id}:"
        rest = sorted(f for f in set(recorded) if f.startswith(prefix) and f not in self.fields)
        for field in rest:
            self.fields.append(field)
            ref = self.sent.get(field)
            if ref is None or not ref.message_id:
                continue  # claimed and never recorded, or unknown: nothing to act on
            self.guard.check()
            log.info(
                "[%s] part %s is left from an earlier execution; removing it", self.thread, field
            )
            delete = getattr(self.outbox, "delete", None)
            try:
                if delete is not None:
                    await delete(ref)
                else:
                    await self.outbox.edit(ref, OutboundMessage(RETIRED_NOTE))
            except ChannelError as exc:
                log.warning("[%s] could not remove part %s: %s", self.thread, field, exc)


CATCH_UP_MIN_WAIT = 0.1  # seconds: the least a catch-up edit waits


class StreamingReply:
    """An answer that grows while the model streams.

    The first text is sent at once; later text edits the same message at most
    once per ``outbox.stream_interval``; ``finish`` makes the final edit with the
    whole text.  Channels that do not stream get only the final message.

    Text held back by the interval, or an edit the channel skipped (it reports
    so: ``agent_core.outbox.edit_skipped``, or a ChannelError), is shown by one
    *catch-up* edit once the interval is over, whether or not more text comes
    (a stream may stall right after it: a slow provider, a long tool-call
    argument that streams no text).  Only a made edit counts as shown; a
    SendRateLimited pushes the catch-up back by its Retry-After.  ``finish``
    calls a pending catch-up off (one under way is let end first);
    ``abandon`` calls it off without a last edit.  A catch-up edit that fails
    with anything but a ChannelError (a lost lock, Redis trouble: the turn meets
    it too and ends) makes no more edits and is not armed again.

    ``finished`` is set once ``finish`` has made its final edit, not before: a
    turn cut off during that edit (its wait for the platform's rate limit ended
    by /interrupt, the turn's timeout) still marks the preview as cut.

    A preview whose message id is unknown (its send timed out after leaving, or
    its sender died mid-request) cannot be edited: ``finish`` then sends the
    whole answer as a new message, unless the preview already held all of it.
    The user may see the stale preview above the answer, never the answer twice.
    A channel that splits an answer into several messages may also keep one of
    them unknown inside an otherwise known ref (Telegram: ``refs.UNKNOWN``); the
    ref is recorded and edited as usual, and the channel leaves that message be.
    """

    def __init__(self, writer: ReplyWriter) -> None:
        self.w = writer
        self.text = ""
        self.ref: MessageRef | None = None
        self._last_edit = 0.0
        self._shown = ""  # the text the message really shows (a skipped edit is not)
        self._preview = ""  # the text of the first (preview) send
        self._catch_up: asyncio.Task[None] | None = None
        self._catching_up = False  # the catch-up task is making its edit
        # no more streamed edits: finish() began, abandon(), or a catch-up edit failed
        # with something other than a ChannelError
        self._closed = False
        self.finished = False  # finish() made its final edit

    @property
    def streaming(self) -> bool:
        return self.w.outbox.stream_interval is not None

    async def feed(self, delta: str) -> None:
        self.text += delta
        interval = self.w.outbox.stream_interval
        if interval is None or not self.text.strip() or self._closed:
            return
        if self.ref is None:
            self.ref = await self.w.say(OutboundMessage(self.text, final=False))
            self._last_edit, self._shown = time.monotonic(), self.text
            self._preview = self.text
        elif self._catch_up is None and self.text != self._shown:
            # (with a catch-up edit due, it shows this text when its time comes)
            if time.monotonic() - self._last_edit >= interval:
                await self._edit(interval)
            else:
                self._schedule(interval)

    def _schedule(self, interval: float) -> None:
        """Held-back text (or a skipped edit) is shown once the interval is over,
        whether or not more text comes: the stream may stall right after it."""
        if self._catch_up is None and not self._closed and self.ref is not None:
            # (at least CATCH_UP_MIN_WAIT: an edit skipped on a channel with no
            # interval is not tried again in a busy loop)
            wait = max(CATCH_UP_MIN_WAIT, self._last_edit + interval - time.monotonic())
            self._catch_up = asyncio.create_task(self._catch_up_after(wait, interval))

    async def _catch_up_after(self, wait: float, interval: float) -> None:
        await asyncio.sleep(wait)
        self._catching_up = True
        try:
            await self._edit(interval, rearm=False)
        except Exception as exc:
            # LockLost, a Redis error (a ChannelError is _edit's own skip): the turn
            # meets it itself and ends, maybe without finish() or abandon(); the
            # catch-up is not armed again, or it would go on for good
            log.debug("[%s] catch-up edit failed: %s", self.w.thread, exc)
            self._closed = True
        finally:
            self._catching_up = False
            self._catch_up = None
        if self.text != self._shown:  # more came (or the edit was skipped)
            self._schedule(interval)

    async def _edit(self, interval: float, *, rearm: bool = True) -> None:
        """One droppable edit with the text so far; ``_shown`` only if it was made."""
        assert self.ref is not None
        text = self.text
        self._last_edit = time.monotonic()
        with watch_skips() as watch:
            try:
                self.ref = await self.w.edit(
                    self.ref, OutboundMessage(text, final=False), droppable=True
                )
            except ChannelError as exc:  # an intermediate edit is droppable
                if exc.partial_ref is not None:  # made part-way: the answer's messages now
                    self.ref = exc.partial_ref
                log.debug("[%s] streaming edit skipped: %s", self.w.thread, exc)
                watch.skipped = True
                if isinstance(exc, SendRateLimited):  # no catch-up before it may
                    self._last_edit += exc.retry_after
        if not watch.skipped:
            self._shown = text
        if rearm and self.text != self._shown:
            self._schedule(interval)

    async def _stop_catch_up(self) -> None:
        """No catch-up edit after this: a pending one is cancelled, one under way
        (a droppable edit: it never waits long) is let end, so its ref counts."""
        task, self._catch_up = self._catch_up, None
        if task is None or task is asyncio.current_task():
            return
        if self._catching_up:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    def abandon(self) -> None:
        """The turn is going away without a last edit (a shutdown, a lost lock, an
        error): no more catch-up edits.  ``finished`` is left as it is."""
        self._closed = True
        if self._catch_up is not None:
            self._catch_up.cancel()
            self._catch_up = None

    async def finish(self, final_text: str | None = None) -> MessageRef | None:
        """The final edit with ``final_text`` (default: the text so far).
        ``finished`` only once it is made: a finish cut short (/interrupt during its
        wait for the platform, a cancel) may be made again, with a marker."""
        self._closed = True
        await self._stop_catch_up()
        text = self.text if final_text is None else final_text
        if not text.strip():
            self.finished = True
            return self.ref
        if self.ref is None:
            self.ref = await self.w.say(OutboundMessage(text))
        elif not self.ref.message_id:
            # The preview cannot be edited: answer anew, unless it holds the whole
            # answer already (compared stripped: the turn strips the model's text,
            # the preview is raw, and Telegram shows neither's outer whitespace).
            if text.strip() != self._preview.strip():
                self.ref = await self.w.say(OutboundMessage(text))
        else:
            self.ref = await self.w.edit(self.ref, OutboundMessage(text))
        self._shown = text
        self.finished = True
        return self.ref
