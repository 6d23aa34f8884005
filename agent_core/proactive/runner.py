"""Running a routine once, and the event trigger that watches incoming messages.

:class:`RoutineRunner` runs one fire of a routine in the scheduler's process:

* ``light``: one call to the cheap model with the routine's prompt; an answer of
  ``ROUTINE_OK`` stays silent, anything else is sent to the notify target
  (:class:`~agent_core.proactive.notify.Notifier`, deduplicated per fire);
* ``full``: a synthetic ``InboundEvent`` (kind message, id
  ``routine:<name>:<fire>:<created_at>``)
  is submitted through :class:`~agent_core.ingest.Ingest` for the target's thread,
  so it takes the same worker path as a person's message: the thread lock, the
  agent loop with tools, approvals as buttons in that chat, the channel's
  formatting.  Its outcome is recorded when the turn ends (an ``after_turn`` hook).

Runs in flight are counted per routine (a Redis sorted set with expiries, so a
dead process's slot frees itself); a fire beyond ``max_concurrent`` is skipped
and recorded as such.

:class:`EventTriggers` is an ingest filter that never refuses anything: a
message matching an event routine's regex queues a run for the scheduler,
subject to the routine's cooldown and dedup window (both Redis SET NX PX, so
they hold across every web / gateway process).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import secrets
import string
import time
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.agent import metered
from agent_core.agent.budget import BudgetRefused
from agent_core.agent.parser import ApprovalReply, is_command, parse
from agent_core.agent.session import ThreadState
from agent_core.errors import SendFailed, SendUnconfirmed
from agent_core.events import SYNTHETIC_PREFIXES, EventKind, InboundEvent
from agent_core.llm.base import ChatMessage, CompletionRequest
from agent_core.proactive.notify import Notifier
from agent_core.proactive.routines import ROUTINE_OK, Routine, RoutineStore, RunRecord
from agent_core.proactive.targets import is_direct
from agent_core.settings import CoreSettings
from agent_core.store import keys, scripts

if TYPE_CHECKING:
    from agent_core.agent.access import AccessControl
    from agent_core.agent.agent import Agent
    from agent_core.agent.hooks import TurnInfo
    from agent_core.ingest import Ingest

log = logging.getLogger(__name__)

ROUTINE_ACCOUNT = "routine"  # billed for routines with no known creator (budgets)

LIGHT_SYSTEM = (
    "You are {name}'s background routine '{routine}'. Do the task below. If there is "
    "nothing worth telling the user, answer exactly ROUTINE_OK and nothing else; otherwise "
    "answer with the short message to send them."
)
LIGHT_SLOT_SECS = 300.0  # how long a light run may hold its concurrency slot
MAX_SEND_FAILURES = 3  # permanent send failures in a row before a routine is paused


def billed_to(r: Routine) -> str:
    """The budget account of a light routine's calls: the person who created it from a
    chat (``telegram:42``), else ``routine`` (created with ``parley routines add``,
    whose ``created_by`` is ``cli``, or by an older version with none)."""
    return r.created_by if ":" in r.created_by else ROUTINE_ACCOUNT


_NOTHING_MARKS = frozenset(string.punctuation + "…—–·")


def is_ok(text: str, token: str) -> bool:
    """True if the model's answer means 'nothing to report': nothing at all, or
    ``token`` with nothing but whitespace, punctuation or symbols around it
    (``**HEARTBEAT_OK**.``, ``✅ HEARTBEAT_OK``).  Any word besides it
    ("HEARTBEAT_OK" then a line "Except: …") is a message, and so is an answer of
    symbols alone ("🔥🚨"); punctuation alone (".") is nothing."""
    t = "".join(c for c in text if c.isalnum() or c == "_")
    # nothing but plain punctuation, spaces and invisible marks ("", ".", "…") says
    # nothing; "‼" or "⁉" (emoji, though Unicode files them as punctuation) does
    return t.upper() == token or all(
        c.isspace() or c in _NOTHING_MARKS or unicodedata.category(c)[0] == "C" for c in text
    )


class RoutineRunner:
    def __init__(
        self,
        settings: CoreSettings,
        agent: Agent,
        ingest: Ingest,
        notifier: Notifier,
        store: RoutineStore,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.agent = agent
        self.redis = agent.redis
        self.ingest = ingest
        self.notifier = notifier
        self.store = store
        self.clock = clock
        self._slot = self.redis.register_script(scripts.SLOT_ACQUIRE)

    # -- concurrency -----------------------------------------------------------
    async def take_slot(self, r: Routine, run_id: str) -> int:
        """1: taken; 0: ``max_concurrent`` runs in flight; 2: ``run_id`` itself is
        (its slot is left as it is, for the run that holds it to free)."""
        hold = LIGHT_SLOT_SECS
        if r.action == "full":
            hold = max(self.settings.turn_timeout_secs, 60.0) + self.settings.lock_ttl_secs
        now_ms = int(time.time() * 1000)
        got = await self._slot(
            keys=[keys.routine_running(r.name)],
            args=[run_id, now_ms, now_ms + int(hold * 1000), r.max_concurrent],
        )
        return int(got)

    async def free_slot(self, name: str, run_id: str) -> None:
        await self.redis.zrem(keys.routine_running(name), run_id)

    # -- one fire ----------------------------------------------------------------
    async def run(self, r: Routine, trigger: str, fire_id: str, context: str = "") -> str:
        """Run ``r`` once; record and return the outcome.  Never raises."""
        started = self.clock()
        t0 = time.perf_counter()
        outcome = "?"
        try:
            lost = r.action == "full" and self.creator_lost_rights(r)
            took = 0 if lost else await self.take_slot(r, fire_id)
            if lost:
                outcome = await self._creator_gone(r)
            elif took == 2:
                outcome = "skipped: this fire is already running"
            elif not took:
                outcome = f"skipped: {r.max_concurrent} run(s) already in flight"
            elif r.action == "full":
                try:
                    outcome = await self._submit(r, fire_id, context)
                except BaseException:  # not submitted: no turn will free the slot
                    await self.free_slot(r.name, fire_id)
                    raise
            else:
                try:
                    outcome = await self._light(r, fire_id, context)
                finally:
                    await self.free_slot(r.name, fire_id)
        except asyncio.CancelledError:  # the worker is stopping (past the drain's grace)
            outcome = "interrupted: the worker stopped"
            if trigger == "cron":
                outcome += "; this fire runs again after the restart"
            await self._record(r, RunRecord(started, trigger, outcome, time.perf_counter() - t0))
            raise
        except Exception as exc:
            log.warning("routine %s (%s) failed: %s: %s", r.name, trigger, type(exc).__name__, exc)
            outcome = f"error: {type(exc).__name__}: {str(exc)[:200]}"
            if isinstance(exc, SendFailed) and not isinstance(exc, SendUnconfirmed):
                outcome += await self._send_failed(r)
        if outcome == "sent":
            await self._send_ok(r)
        await self._record(r, RunRecord(started, trigger, outcome, time.perf_counter() - t0))
        return outcome

    async def _record(self, r: Routine, run: RunRecord) -> None:
        try:
            await self.store.record(r.name, run, created_at=r.created_at)
        except RedisError as exc:
            log.warning("routine %s: could not record its run (%s)", r.name, type(exc).__name__)
        log.info("routine %s (%s): %s in %.2f s", r.name, run.trigger, run.outcome, run.duration)

    async def _send_failed(self, r: Routine) -> str:
        """Count a permanent send failure; at the limit, pause the routine (its chat is
        gone or the bot was removed: every fire would pay for a call nobody receives)
        and tell the admins.  Returns what to add to the outcome."""
        try:
            # counted, and paused, only while the routine is the one this run was of
            failures = await self.store.count_send_failure(r.name, created_at=r.created_at)
            if failures < MAX_SEND_FAILURES:
                return ""
            if await self.store.set_enabled(r.name, False, created_at=r.created_at) is None:
                return ""  # removed meanwhile
        except RedisError as exc:
            log.warning("routine %s: send failure not counted (%s)", r.name, type(exc).__name__)
            return ""
        log.error("routine %s: %d sends in a row failed; paused", r.name, failures)
        await self.agent.notify_admins(
            f"⚠️ Routine {r.name} is paused: its last {failures} messages to {r.notify} "
            "could not be sent (the chat was deleted or the bot removed?). Fix the target, "
            f"then /routine resume {r.name}."
        )
        return f"; paused after {failures} failed sends in a row"

    async def _send_ok(self, r: Routine) -> None:
        try:
            await self.store.reset_send_failures(r.name)
        except RedisError as exc:
            log.warning("routine %s: send failures not reset (%s)", r.name, type(exc).__name__)

    async def _light(self, r: Routine, fire_id: str, context: str) -> str:
        system = LIGHT_SYSTEM.format(name=self.settings.agent_name, routine=r.name)
        prompt = r.prompt + (f"\n\nThe message that triggered this:\n{context}" if context else "")
        req = CompletionRequest(
            (ChatMessage("system", system), ChatMessage("user", prompt)), temperature=0.2
        )
        account = billed_to(r)
        try:
            completion, _ = await metered.complete(
                self.agent.cheap_llm(), req, self.agent.meter(account)
            )
        except BudgetRefused as exc:
            log.warning("routine %s: not run, over budget (%s): %s", r.name, account, exc)
            return "skipped: over budget"
        text = completion.text.strip()
        if is_ok(text, ROUTINE_OK):
            return "ok (silent)"
        ref = await self.notifier.notify(r.notify, text, f"routine:{r.name}:{fire_id}")
        if ref is None:
            return "sent before (not repeated)"
        await self._remember(r, fire_id, text)
        return "sent"

    async def _remember(self, r: Routine, fire_id: str, text: str) -> None:
        """Queue the sent text for the target thread's history (a NOTE event, added by
        the worker that owns the thread), so a reply to it has its context."""
        try:
            thread = await self.notifier.resolve(r.notify)
            note = InboundEvent(
                event_id=f"note:routine:{r.name}:{fire_id}",
                kind=EventKind.NOTE,
                channel=thread.channel,
                thread=thread,
                user_id="routine",
                user_name=f"routine {r.name}",
                text=text,
                received_at=time.time(),
            )
            await self.ingest.submit(note)
        except Exception as exc:  # the message is sent; its memory is a nicety
            log.warning("routine %s: sent, not added to the history (%s)", r.name, exc)

    def creator_lost_rights(self, r: Routine) -> bool:
        """Whether ``r`` was created by a person (``telegram:42``) who is no longer an
        admin or approver: their full job must not run as them, nor as someone else
        (it is paused).  The console's operator and ``parley routines add`` (``cli``)
        keep theirs."""
        channel, sep, _ = r.created_by.partition(":")
        if not sep or channel == "console":
            return False
        return r.created_by not in self.agent.admin_ids | self.agent.approver_ids

    async def _creator_gone(self, r: Routine) -> str:
        """Pause ``r`` (its creator lost their rights) and tell the admins why."""
        try:
            if await self.store.set_enabled(r.name, False, created_at=r.created_at) is None:
                return "skipped: removed meanwhile"
        except RedisError as exc:
            log.warning("routine %s: not paused (%s)", r.name, type(exc).__name__)
            return f"skipped: its creator {r.created_by} is no longer an admin or approver"
        log.error(
            "routine %s: paused, its creator %s is no longer an admin or approver",
            r.name,
            r.created_by,
        )
        await self.agent.notify_admins(
            f"⚠️ Routine {r.name} is paused: it runs as {r.created_by}, who created it and "
            "is no longer an admin or approver. Add it again as yourself (/routine remove "
            f"{r.name}, then /routine add …), or give them the rights back and /routine "
            f"resume {r.name}."
        )
        return f"error: paused: its creator {r.created_by} is no longer an admin or approver"

    def run_as(self, r: Routine, channel: str) -> str:
        """Whose message a full job is: its creator if on that channel (while an admin
        or approver: else the job is paused before it gets here), else an admin /
        approver on that channel (so approvals can be decided there), else 'routine'."""
        creator = [] if self.creator_lost_rights(r) else [r.created_by]
        candidates = [*creator, *sorted(self.agent.admin_ids), *sorted(self.agent.approver_ids)]
        for q in candidates:
            ch, _, uid = q.partition(":")
            if ch == channel and uid:
                return uid
        return "routine"

    async def left_to_run(self, r: Routine, fire_id: str) -> bool:
        """Before a fire whose process died is run again (or given up): whether there is
        anything left to run.  A full job whose turn was submitted has none: the inbound
        stream runs that turn (its duplicate claim is there), and its slot is the
        turn's.  Otherwise the dead run's slot is freed (the rerun would be 'already
        running' until it expired)."""
        if r.action == "full":
            try:
                thread = await self.notifier.resolve(r.notify)
            except Exception:  # the rerun fails on it the same way, and says so
                thread = None
            if thread is not None and await self.redis.exists(
                keys.dedup(thread.channel, job_event_id(r, fire_id))
            ):
                return False
        await self.free_slot(r.name, fire_id)
        return True

    async def _submit(self, r: Routine, fire_id: str, context: str) -> str:
        thread = await self.notifier.resolve(r.notify)
        text = f"[routine {r.name}] {r.prompt}"
        if context:
            text += f"\n\nThe message that triggered this:\n{context}"
        event = InboundEvent(
            # the definition's created_at last: its turn's record (after_turn) goes to
            # this routine only, not to one added again under the name meanwhile
            event_id=job_event_id(r, fire_id),
            kind=EventKind.MESSAGE,
            channel=thread.channel,
            thread=thread,
            user_id=self.run_as(r, thread.channel),
            user_name=f"routine {r.name}",
            text=text,
            # as the target's own messages are: in a group, the group's rules apply
            # (approvals decided by admins / approvers, not a remembered admin DM)
            is_direct=is_direct(thread),
            mentions_bot=True,
            received_at=time.time(),
        )
        res = await self.ingest.submit(event)
        if res.value != "accepted":
            await self.free_slot(r.name, fire_id)
        return f"submitted to {thread}" if res.value == "accepted" else f"not submitted: {res}"

    async def after_turn(self, info: TurnInfo) -> None:
        """Record a full job's outcome when its turn ends (any worker)."""
        eid = info.event.event_id
        if not eid.startswith("routine:"):
            return
        _, name, rest = ([*eid.split(":", 2), "", ""])[:3]
        if not name:
            return
        fire_id, _, created = rest.partition(":")
        try:
            created_at: float | None = float(created) if created else None
        except ValueError:
            created_at = None
        duration = max(0.0, time.time() - info.event.received_at)
        await self.free_slot(name, fire_id)
        await self.store.record(
            name,
            RunRecord(time.time(), "job", f"turn: {info.outcome}", duration),
            created_at=created_at,
        )


def _window_ms(secs: float) -> int:
    """A window in milliseconds for SET PX: at least 1 (a routine stored before
    windows under 1 ms were refused must not make Redis refuse the SET)."""
    return max(1, round(secs * 1000))


def job_event_id(r: Routine, fire_id: str) -> str:
    """The id of a full job's turn (its inbound event): one per fire of a definition."""
    return f"routine:{r.name}:{fire_id}:{r.created_at!r}"


def new_fire_id(prefix: str) -> str:
    return f"{prefix}{int(time.time() * 1000)}{secrets.token_hex(2)}"


# How long an inbound event's id keeps it from queueing the same routine again (as
# long as Ingest's duplicate claim: a redelivery after that is a new event there too).
TRIGGERED_TTL_SECS = 86_400
TENANT_REWRITE_SECS = 86_400.0  # a conversation's learned tenant is rewritten at most this often


class EventTriggers:
    """Ingest filter: queue event routines whose regex matches a message (never refuses).

    Only a person the worker would answer may trigger (``access``: the agent's access
    rules, checked without their side effects); a chat command never does."""

    def __init__(
        self,
        redis: Redis,
        store: RoutineStore,
        *,
        access: AccessControl | None = None,
        refresh_secs: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.store = store
        self._monotonic = monotonic
        self.access = access  # None: no access rules (tests, the operator's own tools)
        self.refresh_secs = refresh_secs
        self._loaded_at = -1e9
        self._routines: list[tuple[Routine, re.Pattern[str]]] = []
        self._seen_tenants: dict[str, float] = {}  # conversation -> written at (monotonic)

    async def _load(self) -> list[tuple[Routine, re.Pattern[str]]]:
        now = time.monotonic()
        if now - self._loaded_at >= self.refresh_secs:
            self._loaded_at = now
            out = []
            for r in await self.store.all():
                if r.trigger == "event" and r.enabled:
                    try:
                        out.append((r, re.compile(r.pattern, re.IGNORECASE)))
                    except re.error:
                        continue
            self._routines = out
        return self._routines

    def invalidate(self) -> None:
        self._loaded_at = -1e9

    async def _learn_tenant(self, event: InboundEvent) -> None:
        """Record the conversation's tenant for short targets: at most once a day per
        conversation and process, in a key that expires (keys.TENANT_TTL_SECS)."""
        t = event.thread
        if t.channel not in ("slack", "discord"):
            return
        field = f"{t.channel}:{t.conversation}"
        now = self._monotonic()
        at = self._seen_tenants.get(field)
        if at is not None and now - at < TENANT_REWRITE_SECS:
            return
        if len(self._seen_tenants) > 10_000:
            self._seen_tenants.clear()
        self._seen_tenants[field] = now
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(keys.tenant(t.channel, t.conversation), t.tenant, ex=keys.TENANT_TTL_SECS)
            pipe.hdel(keys.TENANTS, field)  # an earlier version's entry, if any
            await pipe.execute()

    async def __call__(self, event: InboundEvent) -> str | None:
        if event.kind != EventKind.MESSAGE or event.event_id.startswith(SYNTHETIC_PREFIXES):
            return None
        if is_command(event.text or ""):  # /routine run outage is not an outage
            return None
        try:
            await self._learn_tenant(event)
        except Exception as exc:  # a nicety for short targets; the triggers go on
            log.warning("event triggers: tenant not recorded (%s)", type(exc).__name__)
        try:
            routines = await self._load()
        except Exception as exc:  # a trigger must never block a message
            log.warning("event triggers: routines not loaded (%s)", type(exc).__name__)
            return None
        matching = []
        for r, rx in routines:
            try:
                if r.channel in ("*", event.channel) and rx.search(event.text or ""):
                    matching.append(r)
            except Exception:  # a bad routine never keeps the others from their turn
                log.exception("event triggers: routine %s failed on this message; ignored", r.name)
        # who sent it, and whether it decides an approval, are looked up only for a
        # message some routine is waiting for
        if not matching or await self._decides(event) or not await self._admitted(event):
            return None
        for r in matching:  # one routine failing never keeps the others from their turn
            try:
                await self._maybe_queue(r, event)
            except RedisError as exc:
                log.warning("event triggers: routine %s: Redis error (%s)", r.name, exc)
            except Exception:  # nor may a bad routine
                log.exception("event triggers: routine %s failed on this message; ignored", r.name)
        return None

    async def _decides(self, event: InboundEvent) -> bool:
        """Whether ``event`` is a typed approval decision ("no because the server is
        down") in a thread that awaits one: the worker takes it as the decision, as it
        would ``/deny … down``, so it is not a message for routines either.  The
        session is read only for a text the turn would read as a decision."""
        if not isinstance(parse(event.text or "", awaiting_approval=True), ApprovalReply):
            return False
        try:
            raw = await self.redis.hget(keys.session(event.thread), "d")
            if not raw:
                return False
            state = orjson.loads(raw).get("s")
        except Exception as exc:  # unknown: it is a message like any other
            log.warning("event triggers: thread state not read (%s)", type(exc).__name__)
            return False
        return bool(state == ThreadState.AWAITING_APPROVAL.value)

    async def _admitted(self, event: InboundEvent) -> bool:
        """A stranger the worker refuses (not paired, not on the allow list) must not
        set a routine off: a full routine would act on their text in an admin's chat."""
        if self.access is None:
            return True
        try:
            return await self.access.admits(event)
        except Exception as exc:  # unknown: do not act on it (the message itself goes on)
            log.warning("event triggers: access not checked (%s)", type(exc).__name__)
            return False

    async def _maybe_queue(self, r: Routine, event: InboundEvent) -> None:
        # A text counts as seen for its dedup window only once it triggered: one
        # dropped by the cooldown may trigger when it comes again after it.
        key = ""
        if r.dedup_secs > 0:
            digest = hashlib.sha1((event.text or "").strip().lower().encode()).hexdigest()[:16]
            key = keys.routine_dedup(r.name, digest)
            if await self.redis.exists(key):
                log.info("routine %s: same message within its dedup window; skipped", r.name)
                return
        cd = keys.routine_cooldown(r.name)
        if r.cooldown_secs > 0 and not await self.redis.set(
            cd, b"1", nx=True, px=_window_ms(r.cooldown_secs)
        ):
            log.info("routine %s: in cooldown; message not acted on", r.name)
            return
        if key and not await self.redis.set(key, b"1", nx=True, px=_window_ms(r.dedup_secs)):
            # the same text got in just now through another process
            if r.cooldown_secs > 0:
                await self.redis.delete(cd)
            log.info("routine %s: same message within its dedup window; skipped", r.name)
            return
        # once per inbound event: this filter runs before Ingest's duplicate check, so
        # a platform's redelivery of the event (or its retry after a refusal) comes
        # here again
        if not await self.store.queue_run_once(
            keys.routine_triggered(r.name, event.channel, event.event_id),
            TRIGGERED_TTL_SECS,
            r.name,
            "event",
            text=(event.text or "")[:2000],
            who=event.user_name or event.qualified_user,
            thread=str(event.thread),
        ):
            if r.cooldown_secs > 0:
                await self.redis.delete(cd)  # taken by this redelivery, which runs nothing
            log.info("routine %s: event %s queued it before", r.name, event.event_id)
            return
        log.info("[%s] routine %s triggered by event %s", event.thread, r.name, event.event_id)
