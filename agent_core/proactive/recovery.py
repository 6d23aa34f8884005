"""Stuck-turn recovery: a turn that runs too long, a turn whose worker died.

The worker runs every turn through :meth:`TurnRecovery.run_turn`:

* **Interrupted turns.**  The script that begins a turn (the hand-off's, or
  ``begin``'s) records, next to the turn's reply parts, which worker began it
  (``<event>#s:0`` = ``started:<owner>``), at no extra round trip; the worker's
  completion script removes the record with the message, and a worker that lets
  the thread go without finishing the turn (shutdown, Redis trouble, waiting for
  an earlier arrival) removes its own.  So a turn that begins and finds another
  worker's record knows that execution never completed: its worker died (or
  stalled past its lock).  The first time, the message is run again silently (a
  SIGKILL loses nothing — the delivery invariant — and parts already shown are
  edited, never repeated), alongside everything else, and a retry record
  ``#r:c`` is left; if that rerun is interrupted too, it runs once more alone in
  its worker (``#r:0``); if that one is interrupted as well, the message is
  dropped, the thread's state reset and the user told the previous turn was
  interrupted: a message that kills its worker (out of memory, a crash in native
  code, whatever it is) must not take every worker down in turn, and a crash no
  message caused must not leave the dead worker's chats waiting in a queue.
* **Timeout.**  A turn running longer than ``TURN_TIMEOUT_SECS`` is cancelled
  (time spent waiting out a platform's rate limit does not count:
  ``agent_core.deadline``),
  the user is told, the message is consumed with the session as it was before
  the turn (the history stays valid) and the worker's completion releases the
  lock.  Messages injected into the cancelled turn stay queued and get turns of
  their own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.agent.session import Session, ThreadState
from agent_core.deadline import turn_deadline
from agent_core.errors import ChannelError, SendForbidden
from agent_core.events import EventKind, MessageRef, OutboundMessage, ThreadKey
from agent_core.settings import CoreSettings
from agent_core.store.delivery import TurnState, start_field

if TYPE_CHECKING:
    from agent_core.agent.agent import Agent, TurnResult

log = logging.getLogger(__name__)

INTERRUPTED_DROPPED = (
    "⚠️ My previous turn here was interrupted again (the process running it stopped), "
    "so I gave up on that message. Please send it again if you still need it."
)


UNSAVED_NOTICE = (
    "⚠️ I answered, but could not save this part of our conversation, so I may not "
    "remember it. If it keeps happening, tell whoever runs me."
)
FAILED_NOTICE = (
    "⚠️ Something went wrong on my side while handling that message, so I skipped it. "
    "Please try again; if it keeps happening, tell whoever runs me."
)


def timeout_notice(secs: float) -> str:
    return (
        f"⏱ That took longer than {secs:g} seconds, so I stopped it. "
        "Try again, maybe with a smaller request."
    )


# the longest a rerun of a dead worker's turn waits for the one running before it
QUARANTINE_WAIT_SECS = 120.0
# events a person sent: one that keeps killing its worker is given up, with a notice
PERSON_KINDS = frozenset({EventKind.MESSAGE, EventKind.ACTION, EventKind.COMMAND})
# turns given up after repeated deaths: a person's, and an approval's expiry (which
# answers the messages held for it, attachments and all)
LIMITED_KINDS = PERSON_KINDS | {EventKind.EXPIRY}
EXPIRED_RESULT = "error: not run: the approval request expired"


class TurnRecovery:
    def __init__(self, settings: CoreSettings, agent: Agent, owner: str) -> None:
        self.settings = settings
        self.agent = agent
        self.owner = owner
        self.timeouts = 0
        self.recovered = 0
        self._quarantine = asyncio.Semaphore(1)  # reruns of a dead worker's turns

    async def run_turn(self, thread: ThreadKey, state: TurnState, guard: LockGuard) -> TurnResult:
        head = state.mailbox[0]
        # '#r:c': rerun once alongside others; '#r:0': rerun once alone (the name
        # earlier versions give a rerun, which they too give up after)
        shared, alone = f"{head.event_id}#r:c", f"{head.event_id}#r:0"
        # retry records already there go with the message when it completes
        notes = [f for f in (shared, alone) if f in state.sent or f in state.pending]
        record: str | None = None  # the retry record this rerun leaves
        quarantined = False
        if self._interrupted(state):
            self.recovered += 1
            # Only what a person sent is given up.  A conversation's move must finish
            # (it reruns until it does, as it always did); a routine's note is cheap.
            limited = head.kind in LIMITED_KINDS
            give_up = limited and alone in notes
            log.warning(
                "[%s] previous turn on event %s was interrupted (%s)",
                thread,
                head.event_id,
                "its rerun alone too; dropping it" if give_up else "running it again",
            )
            if give_up:
                return await self._give_up(thread, state, guard, INTERRUPTED_DROPPED, "dropped")
            state.rerun = True  # its message alone: nothing that arrived since rides along
            if limited and shared not in notes:
                # The first rerun runs alongside everything else: after a crash that no
                # message caused (a host lost, memory run out by the load as a whole),
                # every conversation the dead worker held is answered again at once.
                record = shared
            elif limited:
                # Its rerun alongside others was interrupted too.  The worker that died
                # ran many turns, at most one of which killed it; so this rerun runs
                # alone among this worker's reruns, and only a death then counts
                # against it.  The wait comes before the retry record, so a rerun still
                # waiting when this worker dies does not count as tried.  The wait is
                # bounded: a rerun that hangs must not hold every other one (and the
                # worker's concurrency) for its whole turn timeout; one that ran
                # without its turn leaves no record (it was not alone).
                try:
                    async with asyncio.timeout(QUARANTINE_WAIT_SECS):
                        await self._quarantine.acquire()
                    quarantined = True
                    record = alone
                except TimeoutError:
                    log.warning(
                        "[%s] rerun of event %s waited %g s for the one before it; running",
                        thread,
                        head.event_id,
                        QUARANTINE_WAIT_SECS,
                    )
        try:
            if record is not None:
                # rerun silently (recorded parts are edited, never sent twice) and
                # leave a record of which rerun this is
                await self.agent.delivery.record_sent(
                    thread, record, MessageRef(thread.channel, thread.conversation, "")
                )
                notes.append(record)
            result = await self._run(thread, state, guard)
        finally:
            if quarantined:
                self._quarantine.release()
        if result is None:
            return await self._give_up(
                thread, state, guard, timeout_notice(self.settings.turn_timeout_secs), "timeout"
            )
        result.sent_fields.extend(notes)
        return result

    async def _run(
        self, thread: ThreadKey, state: TurnState, guard: LockGuard
    ) -> TurnResult | None:
        """The turn, within ``TURN_TIMEOUT_SECS`` (None: it ran out)."""
        timeout = self.settings.turn_timeout_secs
        try:
            if timeout <= 0:
                return await self.agent.run_turn(thread, state, guard)
            # a wait for the platform's rate limit moves this deadline back
            # (agent_core.deadline): the answer is not lost to a long Retry-After
            async with asyncio.timeout(timeout) as deadline:
                with turn_deadline(deadline):
                    return await self.agent.run_turn(thread, state, guard)
        except TimeoutError:
            self.timeouts += 1
            log.warning(
                "[%s] turn on event %s timed out after %g s",
                thread,
                state.mailbox[0].event_id,
                timeout,
            )
            return None

    def _interrupted(self, state: TurnState) -> bool:
        """Did an earlier execution of the head's turn begin and never complete?  Its
        start record names another owner (a record from before start records had
        owners names none: also another)."""
        field = start_field(state.mailbox[0].event_id)
        by = state.starts.get(field, "" if field in state.sent else None)
        return by is not None and by != self.owner

    async def _tell(
        self, thread: ThreadKey, state: TurnState, guard: LockGuard, text: str, tag: str
    ) -> list[str]:
        """A notice as its own reply part (recorded, so a rerun never repeats it)."""
        head = state.mailbox[0]
        outbox = self.agent.outbox_for(head.channel)
        if outbox is None:
            return []
        writer = ReplyWriter(
            outbox,
            self.agent.delivery,
            thread,
            f"{head.event_id}#{tag}",
            state.sent,
            guard,
            head.reply_ref,
            pending=state.pending,
        )
        writer.hand_back = False  # a stop during a rate-limit wait drops the notice
        try:
            await writer.say(OutboundMessage(text, notice=True))
        except ChannelError as exc:
            log.warning("[%s] could not send notice: %s", thread, exc)
        return writer.fields

    async def tell_failed(
        self,
        thread: ThreadKey,
        state: TurnState,
        guard: LockGuard,
        cause: BaseException | None = None,
    ) -> list[str]:
        """After a turn that failed with an unexpected error: the person is told their
        message was skipped, rather than left waiting (a notice, recorded like any
        reply part so a rerun never repeats it).  Not when ``cause`` (the turn's
        error) is the platform refusing the bot any post there (SendForbidden): the
        notice would be refused the same way.  Never raises."""
        head = state.mailbox[0]
        if head.kind not in PERSON_KINDS:
            return []  # a routine's note, a move: nobody is waiting for an answer
        if forbidden(cause) is not None:
            return []
        try:
            return await self._tell(thread, state, guard, FAILED_NOTICE, "f")
        except Exception as exc:
            log.warning("[%s] could not tell about the failed turn: %s", thread, exc)
            return []

    async def tell_unsaved(
        self, thread: ThreadKey, state: TurnState, guard: LockGuard
    ) -> list[str]:
        """After a turn whose session could not be saved: the person is told it will
        not be remembered (a recorded notice, like :meth:`tell_failed`).  Never raises."""
        if state.mailbox[0].kind not in PERSON_KINDS:
            return []
        try:
            return await self._tell(thread, state, guard, UNSAVED_NOTICE, "u")
        except Exception as exc:
            log.warning("[%s] could not tell about the unsaved session: %s", thread, exc)
            return []

    async def _give_up(
        self, thread: ThreadKey, state: TurnState, guard: LockGuard, text: str, why: str
    ) -> TurnResult:
        from agent_core.agent.agent import TurnResult
        from agent_core.agent.turn import repair_history

        fields = await self._tell(thread, state, guard, text, why[0])
        head = state.mailbox[0]
        # every record of this message (its parts, earlier notices) goes with it
        fields += await self.agent.delivery.records_of(thread, head.event_id)
        session = Session.load(str(thread), state.session_version, state.session_data)
        if session.state == ThreadState.PROCESSING:
            session.state = ThreadState.IDLE
        if (
            head.kind == EventKind.EXPIRY
            and session.state == ThreadState.AWAITING_APPROVAL
            and session.pending_approval == head.text
        ):
            # the approval did expire (its prompt may say so already): the wait ends,
            # and the messages held for it go with this notice unanswered
            from agent_core.agent.turn_approvals import end_wait

            end_wait(session, EXPIRED_RESULT)
            session.held = []
        if session.state != ThreadState.AWAITING_APPROVAL:  # its calls wait for results
            repair_history(session.history)
        session.updated_at = time.time()
        return TurnResult(session, 1, sorted(set(fields)), f"interrupted:{why}")


def forbidden(exc: BaseException | None) -> SendForbidden | None:
    """The SendForbidden ``exc`` is or was raised from (None if it is not one)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, SendForbidden):
            return exc
        exc, seen = exc.__cause__, seen + 1
    return None
