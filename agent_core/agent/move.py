"""A conversation got a new id (EventKind.MOVED): move its state to the new thread.

A platform can give a conversation a new id: a Telegram basic group upgraded to
a supergroup gets a new chat id.  The channel turns the platform's notice into
one MOVED event for the *new* thread naming the old one (``moved_from``).  It
enters the new thread's mailbox ahead of what people write in the new place,
and is de-duplicated like every event (Telegram sends two notices, one in each
chat, and both make the same event id).  The worker runs it instead of a turn,
holding the new thread's lock, and nothing is said in the chat:

1. the old thread's lock is taken once whatever runs there has finished (an
   answer still streaming into the old chat, messages queued behind it);
2. the old thread is marked as moved: from then on its events (a press on an
   old approval prompt) are forwarded to the new thread and never run where
   they are, and the channel sends to the new id;
3. the old conversation is read, merged with what the new thread holds, and
   written there (one script on the new thread's keys);
4. it is deleted at the old thread (one script on the old thread's keys, which
   also releases its lock);
5. routines that notify the old conversation notify the new one.

A rerun (a crash, a notice redelivered after the dedup window) finds steps 2
to 4 done or not and does only what is left (:mod:`agent_core.store.moves`).
Because step 2 comes first, nothing can run in the old place between a crash
and the rerun: the state the rerun finds there is the state step 3 copied.

When the new thread already holds a conversation (someone wrote in the new
place and that reached Parley before the notice), the two are **merged**: the
old history first, then the new; the newer conversation's model and profile win
where it has them; "Always" approvals of both count; usage, cost and turns add
up; the archive of compacted history keeps the old part first.  When both
had a history, the undo checkpoints of both are dropped (each would restore
one part alone), so ``/undo`` starts again from the merged conversation.  A
pending approval of the old conversation goes along only while the new one
has no history yet; otherwise its tool round ends (calls that ran keep their
results, the others end "not run"), its buttons say the request is not active
any more, and the messages held for it are answered in the new place (queued
there after the move; or, while the new conversation waits for an approval of
its own, held with its messages, the old ones first).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from agent_core.agent.reply import LockGuard
from agent_core.agent.session import Session, ThreadState
from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.llm.base import ChatMessage, ToolCall
from agent_core.proactive.routines import RoutineStore
from agent_core.settings import CoreSettings
from agent_core.store.delivery import Delivery, TurnState
from agent_core.store.moves import Copied, Moves, OldThread

log = logging.getLogger(__name__)

RETRY = "move:retry"  # outcome: not done, the MOVED event stays at the head of the mailbox
# A move whose Redis script was refused as a whole by a passing condition (out of
# memory, a busy or loading server, a failover) is tried this many times in all,
# ``retry_delay_secs`` apart and more, before it is given up like any failed turn.
# Only those: a script that failed half-way (WRONGTYPE) or a bug is not repeated,
# since a repeat could merge the old history in twice.
MOVE_ATTEMPTS = 3
_PASSING = ("OOM", "BUSY", "LOADING", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN")


def _passing(exc: BaseException) -> bool:
    """A Redis refusal that left nothing half-done and may not last."""
    return isinstance(exc, ResponseError) and str(exc).upper().startswith(_PASSING)


# the result of an old call that waited for an approval which did not come along
NOT_RUN = "error: not run: the conversation moved before the approval was decided"


def merge(old: Session | None, new: Session | None, thread: str) -> tuple[Session | None, str]:
    """The conversation that continues at ``thread`` (None: nothing to write) and
    the id of the old conversation's pending approval that goes with it ('' none)."""
    if old is None:
        return None, ""
    if new is None:
        return dataclasses.replace(old, thread=thread), old.pending_approval
    carry = (
        old.state == ThreadState.AWAITING_APPROVAL
        and bool(old.pending_approval)
        and not new.history
        and new.state == ThreadState.IDLE
        and not new.pending_approval
    )
    history = list(old.history)
    if not carry:
        _end_round(old, history)
        # routine notes held for the old round: said before the new part, kept there
        history += [ChatMessage("assistant", e.text) for e in _held(old, notes=True)]
    m = dataclasses.replace(new, thread=thread)
    m.history = history + new.history
    m.summary = "\n\n".join(s for s in (old.summary, new.summary) if s)
    m.model = new.model or old.model
    m.profile = new.profile or old.profile
    m.always_approved = old.always_approved | new.always_approved
    m.usage = old.usage + new.usage
    m.cost_usd = old.cost_usd + new.cost_usd
    m.turns = old.turns + new.turns
    m.conversation = max(old.conversation, new.conversation)
    m.created_at = min(old.created_at, new.created_at)
    m.updated_at = max(old.updated_at, new.updated_at)
    m.extra = {**old.extra, **new.extra}
    m.last_prompt_tokens = 0  # the next call measures the merged prompt
    if carry:
        m.state, m.pending_approval = old.state, old.pending_approval
        m.resume, m.held = old.resume, old.held
    else:  # answered after the new thread's own approval, or queued there now
        # the people's messages, in the order they were written
        m.held = [e.to_dict() for e in _held(old, notes=False)] + new.held
    return m, old.pending_approval if carry else ""


def _held(s: Session, *, notes: bool) -> list[InboundEvent]:
    """``s``'s held events: the routine notes, or everything else."""
    events = [InboundEvent.from_dict(d) for d in s.held]
    return [e for e in events if (e.kind == EventKind.NOTE) == notes]


def _end_round(old: Session, history: list[ChatMessage]) -> None:
    """End the old conversation's tool round that waited for an approval which does
    not come along: calls that ran keep their results, the rest end "not run"."""
    rs = old.resume
    if not rs.get("calls"):
        from agent_core.agent.turn import repair_history

        repair_history(history)
        return
    results: dict[str, str] = rs.get("results", {})
    for c in (ToolCall.from_dict(d) for d in rs["calls"]):
        text = results.get(c.id, NOT_RUN)
        history.append(ChatMessage("tool", text, tool_call_id=c.id, name=c.name))


def undo_mode(old: Session | None, new: Session | None) -> str:
    """What happens to the undo checkpoints: each thread's hold its own history
    alone, so they are kept only while that history is the whole conversation
    ("copy": the old thread's replace the new one's; "keep"; "clear")."""
    if old is None:
        return "keep"  # nothing moves in: the new thread's stay valid
    if new is None or not new.history:
        return "copy"  # the old conversation continues alone
    return "clear"


def _rethread(copied: Copied, thread: ThreadKey) -> Copied:
    """An approval hash whose record names ``thread`` (decisions check it)."""
    values = list(copied.values)
    for i in range(0, len(values) - 1, 2):
        if values[i] == b"d":
            d = orjson.loads(values[i + 1])
            d["t"] = str(thread)
            values[i + 1] = orjson.dumps(d)
    return Copied(copied.kind, values, copied.ttl_ms)


class ConversationMover:
    def __init__(
        self, redis: Redis, delivery: Delivery, settings: CoreSettings, *, poll_secs: float = 0.2
    ) -> None:
        self.delivery = delivery
        self.settings = settings
        self.moves = Moves(redis, session_ttl_ms=delivery.session_ttl_ms)
        self.routines = RoutineStore(redis)
        self.poll_secs = poll_secs
        self._failures: dict[str, int] = {}  # MOVED event id -> refused attempts so far
        self.retry_delay_secs = 1.0  # before the second attempt; doubled for the third

    def wait_secs(self) -> float:
        """How long the old thread's running turns are waited for (within the turn timeout)."""
        limit = self.settings.turn_timeout_secs
        return max(limit - 10.0, limit / 2) if limit > 0 else 600.0

    async def run(self, new: ThreadKey, state: TurnState, guard: LockGuard) -> str:
        """Move the conversation named by the mailbox head into ``new``; the outcome
        (:data:`RETRY`: not done yet, run it again).  A script Redis refused whole
        for a passing reason is tried again (:data:`MOVE_ATTEMPTS` in all): a lost
        move costs the conversation its history in the new place.  Anything else
        propagates at once."""
        event_id = state.mailbox[0].event_id
        try:
            outcome = await self._run(new, state, guard)
        except Exception as exc:
            failed = self._failures.pop(event_id, 0) + 1
            if not _passing(exc) or failed >= MOVE_ATTEMPTS:
                raise  # the worker keeps it queued (Redis down, lock lost) or skips it
            self._failures[event_id] = failed
            log.warning(
                "[%s] move attempt %d of %d refused by Redis (%s); retrying",
                new,
                failed,
                MOVE_ATTEMPTS,
                exc,
            )
            await asyncio.sleep(self.retry_delay_secs * 2 ** (failed - 1))
            guard.check()
            return RETRY
        self._failures.pop(event_id, None)
        return outcome

    async def _run(self, new: ThreadKey, state: TurnState, guard: LockGuard) -> str:
        old = state.mailbox[0].moved_from
        if old is None or old == new or old.channel != new.channel:
            log.warning("[%s] a move from %s is not possible; ignored", new, old)
            return "move:ignored"
        token = f"move:{guard.owner or 'local'}:{secrets.token_hex(4)}"
        if not await self._lock(old, token, guard):
            log.warning(
                "[%s] %s still busy after %.0f s; its move waits", new, old, self.wait_secs()
            )
            return RETRY
        released = False
        try:
            fenced = await self.moves.fence(old, new, token)
            if fenced == -1:
                log.warning("[%s] %s had moved elsewhere already; ignored", new, old)
                return "move:elsewhere"
            if fenced == 0:
                log.warning("[%s] lost the lock of %s mid-move; moving again", new, old)
                return RETRY
            written = await self._move_in(old, new, await self.moves.read(old), state)
            if written is None:
                return RETRY
            released = await self.moves.move_out(old, token, written[1])
            if not released:
                log.warning("[%s] lost the lock of %s mid-move; moving again", new, old)
                return RETRY
        finally:
            if not released:
                await self.delivery.release(old, token)
        outcome = "moved" if written[0] else "move:done-before"
        if written[0]:
            log.info("[%s] conversation %s moved here", new, old)
        await self._requeue_held(new, guard.owner or "local")
        try:
            changed = await self.routines.retarget(old, new)
            if changed:
                log.info("[%s] routines now notifying here: %s", new, ", ".join(changed))
        except RedisError as exc:  # they still reach it: sends to the old id are redirected
            log.warning("[%s] routines not retargeted (%s)", new, type(exc).__name__)
        return outcome

    async def _lock(self, old: ThreadKey, token: str, guard: LockGuard) -> bool:
        deadline = time.monotonic() + self.wait_secs()
        while True:
            guard.check()
            if await self.delivery.try_lock(old, token):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.poll_secs)

    async def _move_in(
        self, old: ThreadKey, new: ThreadKey, src: OldThread, state: TurnState
    ) -> tuple[bool, list[str]] | None:
        """Write the merged conversation into ``new``: whether it was written now (not
        before) and the old approval ids to delete (None: ``new``'s session changed
        meanwhile, nothing written)."""
        old_session = (
            Session.load(str(old), src.session_version, src.session_data)
            if src.session_data is not None
            else None
        )
        new_session = (
            Session.load(str(new), state.session_version, state.session_data)
            if state.session_data is not None
            else None
        )
        merged, carried = merge(old_session, new_session, str(new))
        approvals = await self.moves.approvals(old, [carried] if carried else [])
        res = await self.moves.move_in(
            new,
            old,
            session_json=merged.to_json() if merged is not None else None,
            expected_version=state.session_version,
            following=src.following,
            merging=new_session is not None,
            undo=undo_mode(old_session, new_session),
            approvals={aid: _rethread(c, new) for aid, c in approvals.items()},
        )
        if res == -2:
            log.warning("[%s] session changed during a move; moving again", new)
            return None
        pending = old_session.pending_approval if old_session is not None else ""
        return res == 1, [pending] if pending else []

    async def _requeue_held(self, new: ThreadKey, owner: str) -> None:
        """Messages held for an old approval that did not come along (a merge) were
        promised an answer: they go into ``new``'s mailbox, after what waits there
        (idempotent on event id, so a rerun queues nothing twice)."""
        version, data = await self.delivery.load_session(new)
        if data is None:
            return
        s = Session.load(str(new), version, data)
        if s.state != ThreadState.IDLE or not s.held:
            return
        events: list[tuple[bytes, InboundEvent | None]] = [
            (b"", dataclasses.replace(InboundEvent.from_dict(d), thread=new, seq=0)) for d in s.held
        ]
        await self.delivery.handoff_and_begin(events, owner, ack=False)
        s.held = []
        if await self.delivery.save_session(new, s.to_json(), version) == -2:
            # only possible with this thread's lock lost to another worker
            log.warning("[%s] session changed while queueing held messages", new)
        log.info("[%s] %d message(s) held in the old place queued here", new, len(events))
