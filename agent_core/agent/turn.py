"""One turn: parse, gate, run commands / decisions / the loop. Also the loop's delegate.

Flow of a turn (the worker holds the thread lock)::

    head event -> before_inbound hooks
      action (button)          -> decide()
      access / rate refused    -> one short notice, consumed
      /command                 -> the command registry
      yes / always / no        -> decide()          (only while awaiting approval)
      text while awaiting      -> held in the session + "waiting for …" notice
      text                     -> checkpoint -> run_loop()

Approvals are a state machine on the session: when the loop meets calls that
need a person, the session keeps the LLM response's calls, the results already
known and the queue of calls still to decide (``session.resume``), moves to
AWAITING_APPROVAL and the turn ends.  A later decision turn claims the
approval atomically, runs or refuses the call, asks for the next queued call
or — when none is left — appends every result in the original order, injects
the messages held meanwhile, and resumes the loop where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from agent_core.agent import approvals as ap
from agent_core.agent import llm_call, signals
from agent_core.agent import turn_approvals as steps
from agent_core.agent.agent import Agent, friendly_llm_error, user_message_text
from agent_core.agent.budget import BudgetRefused, Meter
from agent_core.agent.commands import CommandContext
from agent_core.agent.context import request_messages
from agent_core.agent.documents import Room, allowance, is_text, read_texts
from agent_core.agent.executor import plan, run_many
from agent_core.agent.fences import with_marker
from agent_core.agent.hooks import ToolHookContext, TurnInfo
from agent_core.agent.images import AttachmentFetcher, fetch_images
from agent_core.agent.interrupt import CONSUMED, RUNNING
from agent_core.agent.loop import (
    LoopOutcome,
    MaxIterations,
    NeedApproval,
    Response,
    Stopped,
    ToolRound,
    run_loop,
)
from agent_core.agent.loopguard import Level, LoopGuard
from agent_core.agent.office import office_kind
from agent_core.agent.parser import ApprovalReply, Command, parse
from agent_core.agent.pdfs import is_pdf
from agent_core.agent.people import author_name, named
from agent_core.agent.profiles import Profile
from agent_core.agent.reply import LockGuard, ReplyWriter, StreamingReply
from agent_core.agent.session import Session, ThreadState, mid_turn
from agent_core.agent.tokens import estimate, tools_tokens
from agent_core.agent.turn_approvals import STOPPED_NOT_RUN, Interrupted, routine_job
from agent_core.deadline import turn_expired
from agent_core.errors import ChannelError, LockLost
from agent_core.events import (
    EventKind,
    InboundEvent,
    OutboundMessage,
    ThreadKey,
)
from agent_core.llm import errors as llm_errors
from agent_core.llm.base import (
    ChatMessage,
    Completion,
    ImagePart,
    ToolCall,
    ToolSpec,
)
from agent_core.outbox import finish_turn
from agent_core.store import keys
from agent_core.store.delivery import TurnState
from agent_core.store.scripting import Call
from agent_core.tools.base import ToolContext

log = logging.getLogger(__name__)

TYPING_DELAY = 0.8  # seconds before a turn shows the typing indicator
STOP_GRACE_SECS = 2.0  # the most a timed-out turn spends marking its preview cut off

T = TypeVar("T")


HELD_SUFFIX = "~held"  # a held message queued again for a turn of its own


class Turn:
    """One turn's state; also the loop's delegate."""

    # the approval steps (agent_core/agent/turn_approvals.py)
    ask = steps.ask
    close_prompt = steps.close_prompt
    hold_while_awaiting = steps.hold_while_awaiting
    finish_pending = steps.finish_pending
    cancel_pending = steps.cancel_pending
    decide = steps.decide
    run_approved = steps.run_approved
    continue_resume = steps.continue_resume
    run_covered = steps.run_covered
    after_wait = steps.after_wait
    settle_given_up = steps.settle_given_up
    stop_resume = steps.stop_resume
    pending_refusal = steps.pending_refusal
    stop_in_wait = steps.stop_in_wait
    expire_pending = steps.expire_pending
    # between iterations: messages that arrived, /interrupt (agent_core/agent/signals.py)
    check_signals = signals.check_signals

    def __init__(
        self,
        agent: Agent,
        thread: ThreadKey,
        state: TurnState,
        session: Session,
        writer: ReplyWriter,
        guard: LockGuard,
    ) -> None:
        self.agent = agent
        self.s = agent.settings
        self.thread = thread
        self.state = state
        self.session = session
        self.writer = writer
        writer.waiter = self.interruptible  # /interrupt ends a wait for a rate limit
        self.guard = guard
        self.consumed = 1
        self.started_ms = int(time.time() * 1000)
        # the /interrupt flags this turn heeds are those set since it began, or
        # since an execution on its message was handed back for a platform's wait
        # (the thread was held meanwhile: a stop sent then was meant for it)
        head_id = state.mailbox[0].event_id if state.mailbox else ""
        self.handed_back_ms = state.handed_back.get(head_id, 0)
        self.watch_from_ms = min(self.started_ms, self.handed_back_ms or self.started_ms)
        self.turn_id = secrets.token_hex(8)  # this turn's model calls stay on one provider
        self.user = ""  # whose turn this is (a decision turn: the requester's)
        self.user_name = ""  # their name, as shown (prompts, "Only <name> …")
        # a routine's job (written as its creator, maybe quoting someone else's
        # message): no person asked for its calls, so no one's "Always" covers them
        self.routine_job = False
        self.head: InboundEvent | None = None
        self.iteration = 0
        self.loop_guard = LoopGuard()
        self.pending_inject: list[ChatMessage] = []
        self.completion_calls: list[Call] = []  # scripts that ride with the completion
        self._checked_signals = False
        # what was queued when the turn began: a /stop among it is not for this turn
        self.queued_at_start = {e.event_id for e in state.mailbox}
        self.stopped_by = ""  # whose /interrupt stopped this turn
        self.kept_unanswered = False  # a stop kept messages in the history unanswered
        # A rerun of a message whose earlier execution died with a reply part on the
        # wire: that part is not sent again (it may have reached the user; on Slack it
        # is looked up, then edited or sent), so this execution answers its own
        # message only.  Messages that arrived meanwhile
        # get turns of their own instead of riding in an answer that is never sent.
        # The same for any rerun of an execution that died: the head alone, so that a
        # message that arrived meanwhile and killed that worker (a file it was reading)
        # does not take the head down with it.  And the same for a head that already
        # has reply parts recorded (an execution handed back mid-answer, by a
        # shutdown or Redis trouble, whose start record went with it): a message
        # folded in now would be answered by editing a part above it.
        prefix = f"{state.mailbox[0].event_id}:" if state.mailbox else "\0"
        answered = any(f.startswith(prefix) for f in (*state.pending, *state.sent))
        self.inject = not state.rerun and not answered
        self._typing: asyncio.Task[None] | None = None
        self._text_room: Room | None = None  # text files' and PDFs' share, this turn
        self._reply: StreamingReply | None = None
        self.streamed_chars = 0  # text the current model call streamed
        self._profile: Profile | None = None
        self._specs: Sequence[ToolSpec] | None = None  # the tools last offered

    # -- entry -------------------------------------------------------------
    async def run(self, head: InboundEvent) -> str:
        outbox = self.writer.outbox
        outcome = "?"
        self.head = head
        self.user, self.user_name = head.qualified_user, head.user_name
        self.routine_job = routine_job(head)
        try:
            event = await self.agent.hooks.run_before_inbound(head)
            if event is None:
                outcome = "dropped-by-hook"
                return outcome
            head = self.head = event
            outcome = await self._dispatch(head)
            return outcome
        except Interrupted:
            # /interrupt ended a send's wait for the platform's rate limit outside
            # the loop's own handling (a command's reply, say): the turn stops there
            log.info("[%s] stopped while a send waited for the platform", self.thread)
            if self.session.state == ThreadState.AWAITING_APPROVAL:
                # its calls wait for their results (session.resume): never repaired
                # here (the wait's end would add them again); a step acting on the
                # approval (closing its prompt, the next call's prompt) ends the wait
                # with what happened, and says so.  A command's reply leaves the wait
                # as it is and says nothing: the queued /interrupt cancels the
                # approval next and tells the person itself (one notice, not two)
                if await self.stop_in_wait():
                    await self.say_notice(self.stopped_notice())
            else:
                repair_history(self.session.history)
                if self.session.state == ThreadState.PROCESSING:
                    self.session.state = ThreadState.IDLE
                await self.say_notice(self.stopped_notice())  # the person is told
            await self._consume_interrupt()
            outcome = "stopped:interrupted"
            return outcome
        except LockLost:
            log.warning("[%s] lock lost mid-turn; stopping without sending more", self.thread)
            raise
        finally:
            if self._typing is not None:
                self._typing.cancel()
            with contextlib.suppress(Exception):
                taken_in = [
                    head.event_id,
                    *(e.event_id for e in self.state.mailbox[1 : self.consumed]),
                ]
                await finish_turn(outbox, self.thread, head, taken_in)
            await self.agent.hooks.run_after_turn(
                TurnInfo(self.thread, head, outcome, self.session)
            )

    async def _dispatch(self, head: InboundEvent) -> str:
        if head.kind == EventKind.NOTE:
            return await self.record_note(head)
        if head.kind == EventKind.EXPIRY:
            return await self.expire_pending(head.text, head.event_id)
        if self.agent.admin_ids:
            await self.agent.remember_admin(head)
        if head.kind == EventKind.ACTION:
            parsed = ap.parse_token(head.action.token) if head.action is not None else None
            if parsed is None:
                await self.private(head, "That button is not active any more.", button=True)
                return "action-ignored"
            return await self.decide(head, parsed[0], parsed[1], button=True)
        awaiting = self.session.state == ThreadState.AWAITING_APPROVAL
        sub = parse(head.text, awaiting_approval=awaiting)
        if isinstance(sub, Command) and self._not_ours(head, sub):
            # another bot's command in a group (Telegram hands a bare ``/weather`` to
            # every bot with privacy mode off): not for us, so no access check, no
            # rate window counted, no refusal said - nothing at all
            log.debug("[%s] /%s: not ours, not addressed: ignored", self.thread, sub.name)
            return "unknown-command-ignored"
        if self.agent.access.needs_redis(head):
            verdict = await self.agent.access.check(head)
            if not verdict.allowed:
                if verdict.notice:
                    await self.say_notice(verdict.notice, refusal=True)
                return f"refused:{verdict.reason}"
        if isinstance(sub, Command):
            return await self.run_command(head, sub)
        if isinstance(sub, ApprovalReply):
            return await self.decide(
                head, self.session.pending_approval, sub.decision, sub.reason, button=False
            )
        if awaiting:
            held = await self.hold_while_awaiting(head)
            if held:
                return held
        return await self.run_text(head)

    # -- talking ---------------------------------------------------------------
    async def say_notice(self, text: str, *, private_to: str = "", refusal: bool = False) -> None:
        """A short notice (``refusal``: an access refusal's, OutboundMessage.refusal)."""
        try:
            message = OutboundMessage(text, notice=True, private_to=private_to, refusal=refusal)
            await self.writer.say(message)
        except ChannelError as exc:
            log.warning("[%s] could not send notice: %s", self.thread, exc)
        except Interrupted:  # during a wait for the platform's rate limit
            log.info("[%s] notice dropped: /interrupt while it waited", self.thread)

    async def private(self, event: InboundEvent, text: str, *, button: bool) -> None:
        """A short notice to the presser only: the press's answer for a button, else a
        notice marked private to them (``private_to``).  Slack and web chat show it
        only to them; Discord only when the event is their slash command (an
        ephemeral follow-up to it): for a typed message Discord has no message only
        one person sees, and the notice is posted in the channel for everyone."""
        if button:
            try:
                await self.writer.outbox.answer_action(event, text)
            except ChannelError as exc:
                log.warning("[%s] could not answer a button press: %s", self.thread, exc)
        else:
            await self.say_notice(text, private_to=event.user_id)

    async def _keep_typing(self) -> None:
        # A turn that answers within TYPING_DELAY shows no indicator: it would
        # cost a platform call and vanish at once.
        await asyncio.sleep(TYPING_DELAY)
        outbox = self.writer.outbox
        while True:
            with contextlib.suppress(Exception):
                await outbox.typing(self.thread)
            await asyncio.sleep(4.0)

    # -- commands ----------------------------------------------------------------
    def _not_ours(self, head: InboundEvent, cmd: Command) -> bool:
        """A group command not addressed to the agent (no ``@name``, mention or reply
        to it) that is not one of its commands: another bot's.  Slack and Discord
        commands are always addressed (``mentions_bot``) or direct."""
        return (
            head.kind is EventKind.COMMAND
            and not (head.is_direct or head.mentions_bot)
            and self.agent.commands.get(cmd.name) is None
        )

    async def run_command(self, head: InboundEvent, cmd: Command) -> str:
        spec = self.agent.commands.get(cmd.name)
        if spec is None:
            if self._not_ours(head, cmd):  # another bot's, in a group (see _dispatch)
                return "unknown-command-ignored"
            await self.say_notice(self.agent.commands.unknown_hint(cmd.name))
            return "unknown-command"
        ctx = CommandContext(self.agent, self.session, head, turn=self)
        reply = await spec.handler(ctx, cmd.args)
        self.session = ctx.session
        if reply:
            await self.writer.say(OutboundMessage(reply))
        return f"command:{cmd.name}"

    # -- text ----------------------------------------------------------------------
    def profile(self) -> Profile:
        if self._profile is None:
            self._profile = self.agent.profiles.get(self.session.profile)
        return self._profile

    def model(self) -> str:
        return self.session.model or self.profile().model

    async def user_message(self, event: InboundEvent) -> ChatMessage:
        event = await named(self.writer.outbox, event)  # names, and files completed
        text = user_message_text(event)
        if not event.attachments:  # most messages: no tasks to start
            return ChatMessage("user", text)
        (images, missing), (blocks, unread) = await asyncio.gather(
            self._images(event), self._texts(event)
        )
        for block in blocks:
            text += "\n\n" + block
        if missing:
            text += "\n[not shown to you: " + "; ".join(missing) + "]"
        if unread:
            text += "\n[not read: " + "; ".join(unread) + "]"
        return ChatMessage("user", text, images=images)

    async def _texts(self, event: InboundEvent) -> tuple[list[str], list[str]]:
        files = [
            a
            for a in event.attachments
            if a.kind != "image" and (is_text(a) or is_pdf(a) or office_kind(a))
        ]
        outbox = self.writer.outbox
        if not files or not isinstance(outbox, AttachmentFetcher):
            return [], []
        self._typing = self._typing or asyncio.create_task(self._keep_typing())
        if self._text_room is None:  # one allowance for the whole turn
            self._text_room = Room(allowance(self.agent.window_for(self.model())))
        return await read_texts(
            outbox,
            files,
            self.thread,
            self._text_room,
            self.agent.downloads,
            pdf_limit=self.s.max_attachment_bytes,
            readers=self.agent.readers,
        )

    async def _images(self, event: InboundEvent) -> tuple[tuple[ImagePart, ...], list[str]]:
        pics = [a for a in event.attachments if a.kind == "image"]
        outbox = self.writer.outbox
        if not pics or not isinstance(outbox, AttachmentFetcher):
            return (), []
        try:
            if not self.agent.llm.model_info(self.model() or None).supports_vision:
                return (), []
        except Exception:
            return (), []
        # downloads can take seconds: the person sees the bot typing meanwhile
        self._typing = self._typing or asyncio.create_task(self._keep_typing())
        return await fetch_images(
            outbox, pics, self.s.max_attachment_bytes, self.thread, self.agent.downloads
        )

    async def run_text(self, head: InboundEvent, *, checkpoint: bool = True) -> str:
        if checkpoint:  # written with the completion, in the same round trip
            self.completion_calls.append(
                self.agent.undo.checkpoint_call(self.thread, head.event_id, self.session)
            )
        prefix = await self.take_held()
        opening = [*prefix, await self.user_message(head)]
        # the turn starts at its first message: the others are taken in by it
        first = next(i for i, m in enumerate(opening) if m.role == "user")
        self.session.history.extend(opening[: first + 1])
        self.session.history.extend(mid_turn(m) for m in opening[first + 1 :])
        return await self.loop()

    async def take_held(self) -> list[ChatMessage]:
        """The messages kept while an approval was pending, as the model will see them
        (their photos included, like any message's; notes as Parley's own words)."""
        held = [InboundEvent.from_dict(d) for d in self.session.held]
        self.session.held = []
        # Another person's message kept meanwhile is not this turn's: it goes back to
        # the thread's mailbox (under a derived id: a rerun queues it once) and gets a
        # turn of its own right after this one (before what was sent after it), whose
        # tools then act for its sender.
        others = [
            e
            for e in held
            if self.user and e.kind != EventKind.NOTE and e.qualified_user != self.user
        ]
        if others:
            await self.agent.delivery.handoff(
                [(b"", dataclasses.replace(e, event_id=e.event_id + HELD_SUFFIX)) for e in others],
                self.guard.owner,
                behind=self.consumed,
            )
            held = [e for e in held if e not in others]

        async def one(e: InboundEvent) -> ChatMessage:
            if e.kind == EventKind.NOTE:
                return ChatMessage("assistant", e.text)
            return await self.user_message(e)

        # together: each message's downloads and name lookup have their own deadline,
        # which one after another could add up to the turn's timeout
        return list(await asyncio.gather(*(one(e) for e in held)))

    async def inject_held(self) -> None:
        """After an approval's tool round is settled: the held messages go to the next
        model call, after the round's results.  Notes held after the last message of
        a person (Parley's own words, nothing to answer) go before the round's tool
        call instead, so that the call never ends on them: the model would take
        them as the start of its own answer (an Anthropic prefill)."""
        held = await self.take_held()
        cut = len(held)
        while cut and held[cut - 1].role == "assistant":
            cut -= 1
        if cut < len(held):
            history = self.session.history
            at = next(
                (i for i in range(len(history) - 1, -1, -1) if history[i].tool_calls),
                len(history),
            )
            history[at:at] = held[cut:]
        self.pending_inject = [mid_turn(m) for m in held[:cut]]  # taken in by this turn

    async def record_note(self, head: InboundEvent) -> str:
        """Add what Parley said outside a turn to the history, with no model call
        (trimmed like a turn's, so routine notes alone cannot grow it for good).
        While a tool round waits for approval it is kept with the held messages, so
        the round's call and its result stay adjacent."""
        if self.session.state == ThreadState.AWAITING_APPROVAL:
            if len(self.session.held) >= steps.MAX_HELD:
                log.info("[%s] note %s not kept: held list full", self.thread, head.event_id)
                return "note-dropped"
            self.session.held.append(head.to_dict())
        else:
            self.session.history.append(ChatMessage("assistant", head.text))
            dropped = self.session.trim(self.s.max_history_messages)
            if dropped:
                await self.agent.archive_messages(self.session, dropped)
        return "noted"

    async def loop(self, first_iteration: int = 1) -> str:
        """Run the loop on the session's history and turn its outcome into words."""
        self._typing = self._typing or asyncio.create_task(self._keep_typing())
        self.session.state = ThreadState.PROCESSING
        self.iteration = first_iteration - 1  # the last iteration done
        history = self.session.history
        try:
            outcome: LoopOutcome = await run_loop(
                self,
                history,
                max_iterations=self.s.max_tool_iterations,
                first_iteration=first_iteration,
            )
        except BudgetRefused as exc:
            await self.say_notice(str(exc))
            outcome = Stopped("budget")
        except asyncio.CancelledError:
            await self._cancelled_streaming()
            raise
        except Interrupted:
            await self._stop_streaming("_(stopped)_")
            await self.say_notice(self.stopped_notice())
            await self._consume_interrupt()
            outcome = Stopped("interrupted")
        except llm_errors.LLMError as exc:
            log.warning("[%s] LLM call failed: %s: %s", self.thread, type(exc).__name__, exc)
            await self._stop_streaming("_(cut off)_")  # a partial answer is final, marked
            # what a group's member who may not start over is told to do instead
            mine = self.head is None or self.agent.may_change_shared(self.head)
            if isinstance(exc, llm_errors.ModelNotAvailable) and self.session.model:
                # the model this conversation chose with /model, not the operator's
                back = "Send" if mine else "Ask an approver or an admin to send"
                await self.say_notice(
                    f"The model `{self.session.model}` chosen with /model is not available. "
                    f"{back} `/model default` to go back to the default, or `/model` for "
                    "the list."
                )
            else:
                start_over = "Send /new" if mine else "Ask an approver or an admin to send /new"
                await self.say_notice(friendly_llm_error(exc, start_over=start_over))
            outcome = Stopped("llm-error")
        finally:
            # whatever ended the loop (LockLost, Redis trouble, a hand-back, ...): a
            # preview not finished makes no more catch-up edits after the turn
            if self._reply is not None and not self._reply.finished:
                self._reply.abandon()
        if not isinstance(outcome, NeedApproval):
            repair_history(history)  # a stop mid-round leaves no call without a result
            self.session.state = ThreadState.IDLE
            self.session.resume = {}
            self.session.pending_approval = ""
        self.session.turns += 1
        self.session.updated_at = time.time()
        if not isinstance(outcome, NeedApproval):  # never cut into a turn still going
            dropped = self.session.trim(self.s.max_history_messages)
            if dropped:
                await self.agent.archive_messages(self.session, dropped)
        if isinstance(outcome, Response):
            return "response"
        if isinstance(outcome, MaxIterations):
            await self.say_notice("I stopped after too many steps without an answer.")
            return "max-iterations"
        if isinstance(outcome, NeedApproval):
            return "need-approval"
        if outcome.reason.startswith("loop:"):
            await self.say_notice(
                "I stopped because I was going in circles with my tools "
                f"({outcome.reason[5:]}). Please rephrase or give me more to go on."
            )
        return f"stopped:{outcome.reason}"

    async def _stop_streaming(self, tail: str) -> None:
        """A preview cut while streaming is finished with its text and ``tail``.
        A reply already finished (the text before a tool call, kept as a message
        of its own) was not cut: it is left as it is.  One whose final edit was
        itself cut short (``finished`` is set only once that edit is made) is
        finished here, with the marker."""
        reply = self._reply
        if reply is not None and reply.ref is not None and not reply.finished:
            with contextlib.suppress(ChannelError):
                await reply.finish(with_marker(reply.text, tail))

    async def _cancelled_streaming(self) -> None:
        """The turn's task is being cancelled.  By ``TURN_TIMEOUT_SECS``: the preview
        is marked "_(cut off)_" like one cut by an LLM error, within
        ``STOP_GRACE_SECS`` (the edit runs as a task of its own, so the cancel does
        not reach it; past the grace it is given up).  By anything else (the worker
        shutting down): no edit at all, the turn is handed back and its rerun edits
        that same message to the new answer; only a pending catch-up edit is
        called off."""
        reply = self._reply
        if not turn_expired():
            if reply is not None:
                reply.abandon()
            return
        task = asyncio.create_task(self._stop_streaming("_(cut off)_"))
        try:
            await asyncio.wait({task}, timeout=STOP_GRACE_SECS)
        finally:
            if not task.done():
                task.cancel()
                log.info("[%s] the cut-off preview was not marked in time", self.thread)
            elif not task.cancelled() and task.exception() is not None:
                log.info(
                    "[%s] could not mark the cut-off preview: %s", self.thread, task.exception()
                )

    # -- interrupt -------------------------------------------------------------
    def may_stop(self, user: str) -> bool:
        """Whose /interrupt stops this turn: its own person's, or an approver's (in a
        group, anyone else's waits for its own turn, where access rules apply)."""
        return not user or user == self.user or user in self.agent.approver_ids

    async def _consume_interrupt(self) -> None:
        """The stop is reported: the flag becomes ``x|<who stopped>``, so that person's
        queued /interrupt stays silent (and only theirs: see interrupt.stop_reply)."""
        with contextlib.suppress(Exception):
            flag = f"{CONSUMED}|{self.stopped_by}"
            await self.agent.redis.set(keys.interrupt(self.thread), flag, ex=600)

    def note_running(self) -> None:
        """Record whose turn runs the loop (saved with the session), so that a
        /interrupt it did not stop can say whose turn it was (interrupt.stop_reply)."""
        self.session.extra[RUNNING] = [self.user, self.user_name, self.started_ms]

    def for_requester(self) -> None:
        """A decision turn (a press, a typed yes, a timer) goes on with the turn that
        asked: it is the requester's from here on, whoever decided — their /interrupt
        stops it, their budget pays for it, their tools' storage and their Always
        apply, and a further prompt names them (``session.resume``'s user and name)."""
        rs = self.session.resume
        if "user" in rs:
            self.user, self.user_name = rs["user"], rs.get("name", "")
            self.routine_job = bool(rs.get("routine"))

    def always_tools(self) -> set[str]:
        """The tools that run without a prompt in this turn: those its person approved
        with "Always" here; none in a routine's job (nobody asked for its calls)."""
        return set() if self.routine_job else self.session.always_tools(self.user)

    async def requester_name(self) -> str:
        """The name of the person whose turn this is, looked up through the channel
        when their event carried only an id (Slack) and the event is theirs."""
        head = self.head
        if self.user_name or head is None or head.qualified_user != self.user:
            return self.user_name
        self.user_name = await author_name(self.writer.outbox, head)
        return self.user_name

    def stopped_notice(self) -> str:
        if self.kept_unanswered:
            return (
                "⏹ Stopped. I haven't answered what you wrote meanwhile; it is kept in "
                "our conversation, so just tell me how to go on."
            )
        return "⏹ Stopped."

    async def interruptible(self, aw: Awaitable[T]) -> T:
        """Await ``aw`` unless /interrupt (or a lost lock) cuts it short (the
        agent's :class:`~agent_core.agent.interrupt.InterruptWatch` looks every
        0.5 s, for all waiting turns at once)."""
        task = asyncio.ensure_future(aw)
        watch = self.agent.interrupts.watch(
            keys.interrupt(self.thread), self.watch_from_ms, lambda: self.guard.lost, self.may_stop
        )
        either: set[asyncio.Future[Any]] = {task, watch.fired}
        try:
            done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self.agent.interrupts.unwatch(watch)
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if self.guard.lost:
            raise LockLost("thread lock lost")
        self.stopped_by = watch.by
        raise Interrupted()

    # -- LoopDelegate ------------------------------------------------------------
    def system_prompt(self) -> str:
        parts = [self.profile().system_prompt, self.agent_rule()]
        if self.session.summary:
            parts.append("Summary of the earlier conversation:\n" + self.session.summary)
        return "\n\n".join(p for p in parts if p)

    @staticmethod
    def agent_rule() -> str:
        from agent_core.agent.agent import DATA_RULE

        return DATA_RULE

    def fixed_tokens(self, system: ChatMessage) -> int:
        """The prompt's part that compaction cannot shrink, as the provider counts
        it: the system prompt (with the summary) and the tools' specs."""
        specs = self.tools() if self._specs is None else self._specs
        return int((estimate([system]) + tools_tokens(specs)) * self.session.token_ratio)

    async def before_llm_call(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        system = ChatMessage("system", self.system_prompt())
        window = self.agent.window_for(self.model() or None)
        sys_tokens = self.fixed_tokens(system)
        if estimate(messages, self.session.token_ratio) + sys_tokens > 0.8 * window:
            await self.agent.compactor.compact(
                self.session, messages, window, system_tokens=sys_tokens, meter=self.meter()
            )
            system = ChatMessage("system", self.system_prompt())  # the summary may be new
        return [system, *request_messages(messages)]  # never a leading assistant message

    def offered(self) -> list[str]:
        names = self.agent.tools.names()
        only = self.profile().tools
        return [n for n in names if only is None or n in only]

    def tools(self) -> Sequence[ToolSpec]:
        self._specs = self._offered_specs()  # counted by before_llm_call's estimate
        return self._specs

    def _offered_specs(self) -> Sequence[ToolSpec]:
        try:
            if not self.agent.llm.model_info(self.model() or None).supports_tools:
                return ()
        except Exception:
            pass
        return self.agent.tools.specs(self.offered())

    call_llm = llm_call.call_llm
    _stream = llm_call.stream_reply

    def meter(self) -> Meter:
        """This turn's person against the budgets (model calls and summary calls)."""
        return self.agent.meter(self.user)

    async def handle_text(self, completion: Completion) -> None:
        reply = self._reply
        text = completion.text.strip() or "(the model returned an empty answer)"
        if reply is None:
            await self.writer.say(OutboundMessage(text))
        else:
            await reply.finish(text)

    async def keep_streamed(self, completion: Completion) -> None:
        if self._reply is not None and self._reply.ref is not None:
            await self._reply.finish(completion.text.strip() or None)

    async def after_iteration(self, iteration: int) -> None:
        self.iteration = iteration

    # -- tools -------------------------------------------------------------------
    def tool_context(self, user: str) -> ToolContext:
        return ToolContext(self.agent.redis, self.s, self.thread, user)

    async def execute_tool_calls(self, calls: Sequence[ToolCall]) -> ToolRound:
        planned = await plan(
            calls,
            self.agent.tools,
            self.offered(),
            self.always_tools(),
            self.agent.hooks,
            ToolHookContext(self.thread, self.user),
        )
        now = [p for p in planned if not p.ask]
        final_calls = [p.call for p in planned]
        done: dict[str, str] = {}
        try:
            outputs = (
                await self.interruptible(
                    run_many(
                        now,
                        self.tool_context(self.user),
                        self.s.tool_timeout_secs,
                        self.s.tool_output_max_chars,
                        done,
                    )
                )
                if now
                else []
            )
        except Interrupted:
            # the model is told what really happened: a call that finished keeps its
            # result (its side effect is done), one still running was cut short
            self.session.history.extend(
                stopped_results(final_calls, done, {p.call.id for p in now})
            )
            raise
        results = {p.call.id: out for p, out in zip(now, outputs, strict=True)}
        asks = [p for p in planned if p.ask]
        if not asks:
            return self.finish_round(final_calls, results)
        self.session.resume = {
            "calls": [c.to_dict() for c in final_calls],
            "results": results,
            "queue": [p.call.id for p in asks],
            "iter": self.iteration + 2,  # this one (iteration + 1) is done once results are in
            "guard": self.loop_guard.to_dict(),
            "user": self.user,
            # the requester's name for the prompt and the notices about it (a
            # platform whose events carry only an id: looked up, see people.py)
            "name": await self.requester_name(),
        }
        if self.routine_job:  # a decision goes on with it: still no one's Always
            self.session.resume["routine"] = True
        try:
            a = await self.ask(asks[0].call)
        except Interrupted:
            # /interrupt ended the prompt's wait for the platform's rate limit: the
            # calls that ran keep their results, the others were not run
            self.session.history.extend(stopped_results(final_calls, results, set()))
            self.session.resume = {}
            raise
        return ToolRound(
            [], approval=NeedApproval(a.id, asks[0].call, tuple(p.call for p in asks[1:]))
        )

    def finish_round(self, calls: Sequence[ToolCall], results: dict[str, str]) -> ToolRound:
        msgs: list[ChatMessage] = []
        stop = ""
        for c in calls:
            text = results.get(c.id, "error: no result")
            v = self.loop_guard.record(c.name, c.arguments, text)
            if v.level is Level.WARN:
                text += (
                    f"\n\n[parley: {v.message}. If you are stuck, stop calling tools and "
                    "answer the user with what you have.]"
                )
            elif v.level is Level.CRITICAL and not stop:
                stop = "loop:" + v.message
            msgs.append(ChatMessage("tool", text, tool_call_id=c.id, name=c.name))
        return ToolRound(msgs, stop=stop)


STOPPED_RUNNING = "error: interrupted by the user (it may have partly run)"


def stopped_results(
    calls: Sequence[ToolCall], done: dict[str, str], started: set[str]
) -> list[ChatMessage]:
    """The results of a round of ``calls`` stopped by /interrupt: a finished call's
    own (``done``), "interrupted" for one ``started`` and still running, "not run"
    for the others (waiting for an approval)."""
    return [
        ChatMessage(
            "tool",
            done.get(c.id, STOPPED_RUNNING if c.id in started else STOPPED_NOT_RUN),
            tool_call_id=c.id,
            name=c.name,
        )
        for c in calls
    ]


def repair_history(history: list[ChatMessage]) -> None:
    """Give every tool call of the last assistant message a result (after a stop)."""
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if m.role == "assistant" and m.tool_calls:
            answered = {x.tool_call_id for x in history[i + 1 :] if x.role == "tool"}
            missing = [c for c in m.tool_calls if c.id not in answered]
            if missing:
                tail = history[i + 1 :]
                del history[i + 1 :]
                history.extend(x for x in tail if x.role == "tool")
                history.extend(
                    ChatMessage(
                        "tool",
                        STOPPED_NOT_RUN,
                        tool_call_id=c.id,
                        name=c.name,
                    )
                    for c in missing
                )
                history.extend(x for x in tail if x.role != "tool")
            return
