"""The approval steps of a turn: ask, hold messages while waiting, decide, resume.

Methods of :class:`agent_core.agent.turn.Turn`, bound there (one concept per
module: the turn's conversation flow stays in turn.py, the approval state
machine's steps live here).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent_core.agent import approvals as ap
from agent_core.agent.executor import Planned, cap, run_one
from agent_core.agent.loopguard import LoopGuard
from agent_core.agent.people import author_name
from agent_core.agent.session import Session, ThreadState
from agent_core.errors import ChannelError
from agent_core.events import EventKind, InboundEvent, OutboundMessage
from agent_core.llm.base import (
    ChatMessage,
    ToolCall,
)

if TYPE_CHECKING:
    from agent_core.agent.turn import Turn

log = logging.getLogger(__name__)

MAX_HELD = 50  # messages kept while a thread awaits a decision
DENIED = "denied: the user did not approve this call; it was not run."
INTERRUPTED = "error: interrupted by the user"
CUT_OFF = "error: approved, but the turn running it was stopped; it may or may not have run"
STOPPED_NOT_RUN = "error: not run (the turn was stopped)"
RESULT_RETRY_SECS = 5.0  # how long an approved call's result write is tried again
ROUTINE_PREFIX = "routine:"  # a routine's job's event id (proactive/runner.py job_event_id)


def routine_job(event: InboundEvent) -> bool:
    """Whether ``event`` is a routine's job (written as its creator, or an admin),
    not a person's message; held and queued again (``…~held``) it still is."""
    return event.event_id.startswith(ROUTINE_PREFIX)


class Interrupted(Exception):
    """The user sent /interrupt: the running step stops."""


async def ask(self: Turn, call: ToolCall) -> ap.PendingApproval:
    rs = self.session.resume
    a = self.agent.approvals.new(
        self.thread,
        call.name,
        call.id,
        call.arguments,
        rs.get("user", self.user),
        rs.get("name", ""),
    )
    await self.agent.approvals.create(self.thread, a)
    always = may_always(self, call.name)
    group = self.head is not None and not self.head.is_direct
    text = ap.prompt_text(
        a,
        self.s.approval_ttl_secs,
        always=always,
        group=group,
        reply_only=reply_only(self),
        command=typed_command(self),
    )
    ref = await self.writer.say(OutboundMessage(text, buttons=ap.buttons(a.id, always=always)))
    part = self.writer.fields[-1]  # a rerun asking again sends its prompt as this part
    await self.agent.approvals.set_prompt_ref(self.thread, a.id, ref, part)
    a.prompt_ref, a.prompt_part = ref, part
    # what arrived up to now was sent before this prompt could be seen: a "yes" among
    # it answers something else (the model's question, an earlier prompt), not this
    rs["seen"] = await self.agent.approvals.arrivals(self.thread)
    self.session.state = ThreadState.AWAITING_APPROVAL
    self.session.pending_approval = a.id
    log.info("[%s] approval %s asked for %s", self.thread, a.id, call.name)
    return a


async def close_prompt(self: Turn, a: ap.PendingApproval, decision: str, by_name: str) -> None:
    if a.prompt_ref is None:
        return
    if a.prompt_part:
        owner = await self.agent.approvals.prompt_owner(self.thread, a.prompt_part)
        if owner and owner != a.id:
            # a rerun of its turn wrote over that message (another prompt, its text)
            log.info("[%s] prompt of %s was written over; left as it is", self.thread, a.id)
            return
    text = ap.resolved_text(a, decision, by_name, self.agent.clock())
    try:
        await self.writer.edit(a.prompt_ref, OutboundMessage(text))
    except ChannelError as exc:
        log.warning("[%s] could not update approval prompt: %s", self.thread, exc)


async def hold_while_awaiting(self: Turn, head: InboundEvent) -> str:
    """Keep ``head`` for after the decision; '' if the approval is gone (expired)."""
    aid = self.session.pending_approval
    a = await self.agent.approvals.load(self.thread, aid) if aid else None
    if a is not None and sent_at(self, head) <= a.expires_at and not a.decision:
        if len(self.session.held) >= MAX_HELD:
            await self.say_notice(
                f"I'm still waiting for your decision on **{a.tool}**, and I can't queue "
                "more messages until then. This one was not kept — please decide first."
            )
            return "held-full"
        self.session.held.append(head.to_dict())
        if self.agent.clock() > a.expires_at:
            # sent while the prompt was live, taken up after its time (workers down,
            # a backlog): a press made in time, or the timer's expiry, is queued
            # behind it and settles the wait; asking for a decision now would only
            # earn an "expired"
            return "held"
        if may_decide(self, head, a):
            always = may_always(self, a.tool)
            buttons = "Approve / Always / Deny" if always else "Approve / Deny"
            await self.say_notice(
                f"⏳ I'm waiting for your decision on **{a.tool}** (the approval above: "
                f"{buttons}{typed_choice(self, always=always)}). "
                "I'll answer this message right after."
            )
        else:  # someone else's request in a group: not theirs to decide
            who = a.requester_name or "the person who asked"
            await self.say_notice(
                f"⏳ I'm waiting for {who}'s decision on **{a.tool}** (the approval above). "
                "I'll answer your message right after."
            )
        return "held"
    if a is not None and a.decision:
        await self.settle_given_up(a)
        return ""
    if a is not None:
        res = await self.agent.approvals.claim(self.thread, a.id, "expired", "", "", head.event_id)
        await self.close_prompt(a, res.decision if res.decision else "expired", "")
    await self.finish_pending("error: not run: the approval request expired")
    return ""


def sent_at(self: Turn, head: InboundEvent) -> float:
    """When ``head`` reached Parley (its ingest time, stamped by Parley's web
    process), or now if later (another host's clock ahead of ours) or unknown:
    a message or press taken up late (workers down, a backlog) is judged by it."""
    now = self.agent.clock()
    return min(now, head.received_at) if head.received_at > 0 else now


async def expire_pending(self: Turn, aid: str, event_id: str) -> str:
    """Approval ``aid``'s time ran out (the scheduler's timer, an EXPIRY event):
    its prompt loses its buttons; if this conversation still waits for it, the wait
    ends and what its requester wrote meanwhile is answered.  A no-op for an
    approval decided or cancelled before."""
    a = await self.agent.approvals.load(self.thread, aid)
    current = (
        self.session.state == ThreadState.AWAITING_APPROVAL and self.session.pending_approval == aid
    )
    if a is not None:
        res = await self.agent.approvals.claim(self.thread, aid, "expired", "", "", event_id)
        if res.outcome is ap.ClaimOutcome.EXPIRED and res.mine:
            # (a message there after the expiry may have closed it already)
            await self.close_prompt(a, "expired", "")
        elif res.outcome is ap.ClaimOutcome.ALREADY and current:
            # decided by a turn that was given up: end the wait with what happened
            a.decision = a.decision or res.decision
            self.for_requester()
            await self.settle_given_up(a)
            return await answer_held(self, "approval-late")
    if not current:
        return "expiry-stale"
    log.info("[%s] approval %s expired with nobody deciding", self.thread, aid)
    self.for_requester()  # whose turn was waiting
    await self.finish_pending("error: not run: the approval request expired")
    return await answer_held(self, "approval-expired")


async def answer_held(self: Turn, outcome: str) -> str:
    """After a wait ended by no one's message (a timer, or a late press on a prompt
    that expired or whose turn was given up): answer what the waiting turn's person
    (``self.user``: see Turn.for_requester) wrote meanwhile, as an answer to their
    first such message (its place, its reply, its name: the timer's event is no one's,
    a press is no message); no model call if they wrote nothing; others' messages
    get turns of their own, and Parley's own notes just join the history."""
    first = next(
        (
            e
            for e in map(InboundEvent.from_dict, self.session.held)
            if e.kind != EventKind.NOTE and e.qualified_user == self.user
        ),
        None,
    )
    if first is not None:
        self.head = first
        self.routine_job = routine_job(first)
        self.writer.reply_to = first.reply_ref
        return await self.after_wait(outcome)
    notes = await self.take_held()  # hands the others' messages back to the mailbox
    self.session.history.extend(notes)
    return outcome


async def settle_given_up(self: Turn, a: ap.PendingApproval) -> None:
    """The approval was decided, but the turn acting on it was given up (timeout,
    error) and the session put back as it was: finish the wait with what really
    happened, never "expired" for a call that ran."""
    stopped = "error: not run: the turn was stopped"
    if a.decision in ("approve", "always"):
        if a.decision == "always" and may_always(self, a.tool):
            self.session.grant_always(a.requester, a.tool)
        # cut off after it started, it may have run; never started, it did not
        result = a.result if a.result is not None else CUT_OFF if a.started else stopped
    elif a.decision == "deny":
        result = DENIED
    else:
        result = f"error: not run: the request was {a.decision}"
    results: dict[str, str] = self.session.resume.setdefault("results", {})
    results[a.call_id] = result
    # the other queued calls that decision let run ("Always" covering them: see
    # run_covered) are recorded on it: what ran keeps its result, what was cut off
    # may or may not have run; only the rest were not run
    for cid in self.session.resume.get("queue", ()):
        if cid == a.call_id or cid in results:
            continue
        started, res = await self.agent.approvals.call_record(self.thread, a.id, cid)
        if res is not None:
            results[cid] = res
        elif started:
            results[cid] = CUT_OFF
    log.info("[%s] approval %s was decided (%s) by a turn given up", self.thread, a.id, a.decision)
    await self.finish_pending(stopped)


async def finish_pending(self: Turn, text: str) -> None:
    """End the wait without running what is left; the history stays valid."""
    end_wait(self.session, text)


def end_wait(session: Session, text: str) -> None:
    """``session`` stops waiting for its approval: the calls not run get ``text`` as
    their result (so the history stays valid) and it is idle again."""
    rs = session.resume
    if rs:
        results: dict[str, str] = rs.get("results", {})
        for cid in rs.get("queue", ()):
            results.setdefault(cid, text)
        calls = [ToolCall.from_dict(c) for c in rs.get("calls", ())]
        add_results(
            session.history,
            [
                ChatMessage("tool", results.get(c.id, text), tool_call_id=c.id, name=c.name)
                for c in calls
            ],
        )
    session.resume = {}
    session.pending_approval = ""
    session.state = ThreadState.IDLE


def add_results(history: list[ChatMessage], results: list[ChatMessage]) -> None:
    """Add a tool round's ``results`` to ``history``, each call's once: one whose
    call already has a result after the assistant message that made it (a history
    repaired earlier) is skipped, since a second result for a call makes every later
    model call fail.  The others go right after that message's results."""
    ids = {m.tool_call_id for m in results}
    at = next(
        (
            i
            for i in range(len(history) - 1, -1, -1)
            if history[i].role == "assistant" and any(c.id in ids for c in history[i].tool_calls)
        ),
        None,
    )
    if at is None:  # (the round's call is not in view: as before, at the end)
        history.extend(results)
        return
    end = at + 1
    while end < len(history) and history[end].role == "tool":
        end += 1
    answered = {m.tool_call_id for m in history[at + 1 : end]}
    history[end:end] = [m for m in results if m.tool_call_id not in answered]


async def stop_in_wait(self: Turn) -> bool:
    """/interrupt ended a send of this turn (its wait for the platform's rate limit)
    while the session awaits an approval.  If this turn was acting on that approval
    (it was decided, cancelled or expired, or is gone: the prompt's close, the prompt
    of the next call queued), the wait ends here, with what really happened: a call
    that ran keeps its result, a denied, cancelled or expired one says so, the rest
    "not run" (the turn was stopped); True.  False if the approval is still to be
    decided (a command's reply was stopped, say): the wait goes on, its prompt still
    answers it.  Never a repaired history: the round's results go in once, here or
    when the wait ends later."""
    aid = self.session.pending_approval
    a = await self.agent.approvals.load(self.thread, aid) if aid else None
    if a is not None and not a.decision:
        return False
    results: dict[str, str] = self.session.resume.setdefault("results", {})
    if a is not None and a.call_id not in results:
        if a.result is not None:
            results[a.call_id] = a.result
        elif a.started:
            results[a.call_id] = CUT_OFF
        elif a.decision == "deny":
            results[a.call_id] = DENIED
        elif a.decision == "expired":
            results[a.call_id] = "error: not run: the approval request expired"
        elif a.decision not in ("approve", "always"):  # cancelled (/new, /clear, …)
            results[a.call_id] = "error: not run: the user cancelled the request"
    log.info("[%s] /interrupt during approval %s's step: the wait ends", self.thread, aid)
    await self.finish_pending(STOPPED_NOT_RUN)
    return True


def reply_only(self: Turn) -> bool:
    """In this group a plain "yes" never reaches Parley, only a reply to its
    message does (the channel says so: agent_core.outbox, group text)."""
    group = self.head is not None and not self.head.is_direct
    return group and not getattr(self.writer.outbox, "group_text_reaches", True)


def typed_command(self: Turn) -> str | None:
    """How typed words reach Parley in this conversation, if the channel says
    (``typed_command``, agent_core.outbox): None, as ``reply_only`` says; a command:
    only as its text; '': not at all (the buttons only)."""
    ask = getattr(self.writer.outbox, "typed_command", None)
    return ask(self.thread) if callable(ask) else None


def typed_choice(self: Turn, *, always: bool = True) -> str:
    """', or <how to type> yes / always / no' for a notice ('' where typing cannot
    reach Parley: the buttons only); ``always``: the tool may be approved for good
    (else it asks every time, and the words are yes / no)."""
    command = typed_command(self)
    if command == "":
        return ""
    words = ("yes", "always", "no") if always else ("yes", "no")
    if command:
        return ", or send " + " / ".join(f"`{command} {w}`" for w in words)
    return f", or {'reply to it with' if reply_only(self) else 'type'} " + " / ".join(words)


def may_always(self: Turn, tool_name: str) -> bool:
    """Whether "Always" may cover ``tool_name`` (not for a tool that asks every
    time, whatever an older session or a given-up turn recorded)."""
    if self.routine_job or self.session.resume.get("routine"):
        return False  # no one's Always covers a routine's job: none is offered
    tool = self.agent.tools.get(tool_name)
    return tool is not None and tool.allow_always


def may_decide(self: Turn, head: InboundEvent, a: ap.PendingApproval) -> bool:
    """The requester or an approver; for a routine's call made as ``routine`` (no
    person asked), whoever writes in that one-to-one chat (a web session, a DM)."""
    if self.agent.may_decide(head.qualified_user, a):
        return True
    return a.requester == f"{head.channel}:routine" and head.is_direct


async def pending_refusal(self: Turn, head: InboundEvent) -> str:
    """Why ``head``'s sender may not cancel the pending approval ('' if they may,
    or none is pending): cancelling is deciding, so the same people may."""
    aid = self.session.pending_approval
    if self.session.state != ThreadState.AWAITING_APPROVAL or not aid:
        return ""
    a = await self.agent.approvals.load(self.thread, aid)
    if a is None or a.decision or may_decide(self, head, a):
        return ""
    if self.agent.clock() > a.expires_at:
        return ""  # expired: there is nothing left to decide, anyone may end the wait
    who = a.requester_name or "the person who asked"
    return f"An approval is pending; only {who} or an approver can cancel it (or decide it)."


async def cancel_pending(self: Turn, head: InboundEvent, why: str = "cancel") -> bool:
    """Cancel the approval being waited for (/new, /clear, /undo, /interrupt);
    whether one was cancelled."""
    aid = self.session.pending_approval
    if self.session.state != ThreadState.AWAITING_APPROVAL or not aid:
        return False
    a = await self.agent.approvals.load(self.thread, aid)
    if a is not None and a.decision in ("approve", "always", "deny"):
        # decided by a turn that was given up: end the wait with what happened
        # (nothing is cancelled, so the command does not say it was)
        await self.settle_given_up(a)
        return False
    if a is not None:
        by = await author_name(self.writer.outbox, head) or head.user_id
        res = await self.agent.approvals.claim(
            self.thread, aid, why, head.qualified_user, by, head.event_id
        )
        await self.close_prompt(a, res.decision or why, by)
    await self.finish_pending("error: not run: the user cancelled the request")
    return True


async def decide(
    self: Turn,
    head: InboundEvent,
    aid: str,
    decision: str,
    reason: str = "",
    *,
    button: bool,
    named: bool = False,
) -> str:
    """``head``'s decision on approval ``aid``: a press (``button``), or typed (a
    word, /approve, /deny; ``named``: the approval's id was typed, so it was seen)."""
    store = self.agent.approvals
    if not aid:
        await self.private(head, "There is nothing waiting for a decision.", button=button)
        return "approval-none"
    a = await store.load(self.thread, aid)
    current = self.session.pending_approval == aid and bool(self.session.resume)
    if a is None or a.thread != str(self.thread):
        if a is None and current:  # its record is gone (expired long ago): end the wait
            await self.private(head, "That approval expired, so nothing was run.", button=button)
            self.for_requester()
            await self.finish_pending("error: not run: the approval request expired")
            return await answer_held(self, "approval-expired")
        await self.private(head, "That approval is not active any more.", button=button)
        return "approval-unknown"
    if button and self.agent.access.needs_redis(head) and not await self.agent.access.admits(head):
        # a press by someone the bot does not answer here (a stranger in a group
        # chat not approved, GROUP_POLICY): decides nothing, whoever they are
        await self.private(head, "I don't take decisions from you here.", button=True)
        return "approval-not-allowed"
    if not may_decide(self, head, a):
        who = a.requester_name or "the person who asked"
        await self.private(head, f"Only {who} or an approver can decide this.", button=button)
        return "approval-not-allowed"
    if not (button or named) and current and 0 < head.seq <= self.session.resume.get("seen", 0):
        await self.private(
            head,
            f"That came before I asked about **{a.tool}**, so I did not take it as a "
            f"decision. Use the buttons on the request above"
            f"{typed_choice(self, always=may_always(self, a.tool))} now.",
            button=False,
        )
        return "approval-early"
    if decision == "always" and not may_always(self, a.tool):
        decision = "approve"  # a typed "always" for a tool that asks every time
    by = await author_name(self.writer.outbox, head) or head.user_id
    # judged by when it was made (its ingest time), not when a worker took it up
    res = await store.claim(
        self.thread, aid, decision, head.qualified_user, by, head.event_id, head.received_at
    )
    if res.outcome is ap.ClaimOutcome.UNKNOWN:
        await self.private(head, "That approval is not active any more.", button=button)
        return "approval-unknown"
    if res.outcome is ap.ClaimOutcome.ALREADY:
        said = ap.DECIDED.get(res.decision, res.decision)
        await self.private(head, f"Already decided ({said}).", button=button)
        if not current:
            return "approval-late"
        # decided by a turn that was given up: end the wait with what happened, and
        # answer what the requester wrote meanwhile, as the timer does (not the
        # presser's turn: an approver's press is not a message to answer)
        a.decision = a.decision or res.decision
        self.for_requester()
        await self.settle_given_up(a)
        return await answer_held(self, "approval-late")
    if res.outcome is ap.ClaimOutcome.EXPIRED:
        await self.private(
            head, "This approval request expired, so nothing was run.", button=button
        )
        if current:
            await self.close_prompt(a, "expired", "")
            self.for_requester()  # as the timer's expiry: the requester's held messages
            await self.finish_pending("error: not run: the approval request expired")
            return await answer_held(self, "approval-expired")
        return "approval-expired"
    if not current:
        await self.private(head, "That approval is not active any more.", button=button)
        # nothing waits for it (its turn failed after asking): its buttons go
        await self.close_prompt(a, "cancel", "")
        return "approval-stale"
    decision = res.decision
    # from here on the requester's turn, whoever decided: their /interrupt stops the
    # approved call (Turn.may_stop), and what follows names and charges them
    self.for_requester()
    self.note_running()
    if button:
        await self.private(head, "", button=True)  # acknowledge the press (silently)
    await self.close_prompt(a, decision, by)
    if decision in ("approve", "always"):
        if decision == "always" and may_always(self, a.tool):
            self.session.grant_always(a.requester, a.tool)
        if a.result is not None:
            result = a.result
        elif a.started:
            result = CUT_OFF
            await store.store_result(self.thread, aid, result)
        else:
            await store.mark_started(self.thread, aid)
            try:
                result = await self.run_approved(a)
            except Interrupted:
                await keep_result(self, aid, INTERRUPTED)
                return await self.stop_resume(a.call_id)
            await keep_result(self, aid, result)
    else:
        result = DENIED
        if reason:
            result += f" Their reason: {cap(reason, 500)}"
    log.info("[%s] approval %s: %s by %s", self.thread, aid, decision, head.qualified_user)
    rs = self.session.resume
    rs.setdefault("results", {})[a.call_id] = result
    queue: list[str] = rs.get("queue", [])
    if queue and queue[0] == a.call_id:
        queue.pop(0)
    return await self.continue_resume(head, aid)


async def after_wait(self: Turn, outcome: str) -> str:
    """The wait ended without running its calls: answer what was held meanwhile."""
    if self.session.held:
        await self.inject_held()
        return await self.loop(1)
    return outcome


async def run_approved(self: Turn, a: ap.PendingApproval) -> str:
    tool = self.agent.tools.get(a.tool)
    if tool is None:
        return f"error: there is no tool named {a.tool!r}"
    try:
        args = self.agent.tools.parse_args(a.tool, a.arguments)
    except ValueError as exc:
        return f"error: invalid arguments: {exc}"
    p = Planned(ToolCall(a.call_id, a.tool, a.arguments), tool, args)
    self._typing = self._typing or asyncio.create_task(self._keep_typing())
    return await self.interruptible(  # Interrupted: the caller stops the turn
        run_one(
            p,
            self.tool_context(a.requester),
            self.s.tool_timeout_secs,
            self.s.tool_output_max_chars,
        )
    )


async def continue_resume(self: Turn, head: InboundEvent, decided: str) -> str:
    """Go on after approval ``decided``: run or ask for the calls still queued."""
    rs = self.session.resume
    calls = {c["id"]: ToolCall.from_dict(c) for c in rs.get("calls", ())}
    queue: list[str] = rs.get("queue", [])
    results: dict[str, str] = rs.setdefault("results", {})
    self.for_requester()
    while queue:
        call = calls[queue[0]]
        if call.name in self.always_tools() and may_always(self, call.name):
            try:
                results[call.id] = await self.run_covered(call, decided)
            except Interrupted:
                return await self.stop_resume(call.id)
            queue.pop(0)
            continue
        await self.ask(call)
        return "need-approval"
    # every call of that response is settled: feed the results back, in order
    self.loop_guard = LoopGuard.from_dict(rs.get("guard"))
    first = int(rs.get("iter", 1))
    ordered = [calls[c["id"]] for c in rs.get("calls", ())]
    rnd = self.finish_round(ordered, results)
    self.session.history.extend(rnd.results)
    self.session.resume = {}
    self.session.pending_approval = ""
    await self.inject_held()
    if rnd.stop:
        self.session.state = ThreadState.IDLE
        kept, self.pending_inject = self.pending_inject, []
        self.session.history.extend(kept)  # in view of the next turn, never dropped
        await self.say_notice(
            f"I stopped because I was going in circles with my tools ({rnd.stop[5:]})."
            + (
                " I haven't answered what you wrote meanwhile; it is kept in our "
                "conversation, so just tell me how to go on."
                if any(m.role == "user" for m in kept)
                else ""
            )
        )
        return f"stopped:{rnd.stop}"
    return await self.loop(first)


async def run_covered(self: Turn, call: ToolCall, decided: str) -> str:
    """A queued call that an "Always" covers, run at most once: recorded on the
    deciding approval, so a rerun of this turn (a crash, a shutdown past its grace)
    reuses its result, or says it may or may not have run."""
    store = self.agent.approvals
    started, result = await store.call_record(self.thread, decided, call.id)
    if result is not None:
        return result
    if started:
        await store.store_result(self.thread, decided, CUT_OFF, call.id)
        return CUT_OFF
    await store.mark_started(self.thread, decided, call.id)
    a = ap.PendingApproval("", str(self.thread), call.name, call.id, call.arguments, self.user)
    try:
        result = await self.run_approved(a)
    except Interrupted:
        await keep_result(self, decided, INTERRUPTED, call.id)
        raise
    await keep_result(self, decided, result, call.id)
    return result


async def keep_result(self: Turn, aid: str, result: str, call_id: str = "") -> None:
    """Record the result of a call approval ``aid`` let run (``call_id``: one an
    "Always" covered).  It exists only in memory until then, and a rerun finding the
    call started without it says it may or may not have run: a Redis blip on this one
    write is tried again, with backoff, for a few seconds (well within the thread
    lock's heartbeat: a third of LOCK_TTL_SECS) before it ends the turn."""
    budget = min(RESULT_RETRY_SECS, self.s.lock_ttl_secs / 3)
    deadline = asyncio.get_running_loop().time() + budget
    delay = 0.05
    while True:
        try:
            await self.agent.approvals.store_result(self.thread, aid, result, call_id)
            return
        except (RedisConnectionError, RedisTimeoutError) as exc:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise
            log.warning(
                "[%s] approval %s: result not recorded (%s); trying again",
                self.thread,
                aid,
                type(exc).__name__,
            )
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, 1.0)


async def stop_resume(self: Turn, call_id: str) -> str:
    """/interrupt while an approved call ran: that call and every call still
    queued end as interrupted, and the turn stops (as the loop does)."""
    self.session.resume.setdefault("results", {})[call_id] = INTERRUPTED
    await self.finish_pending("error: not run: the user interrupted the turn")
    await self.say_notice("⏹ Stopped.")
    await self._consume_interrupt()
    return "stopped:interrupted"
