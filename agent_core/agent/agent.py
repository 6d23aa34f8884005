"""The agent: turns one mailbox entry into replies.

:meth:`Agent.run_turn` is called by the worker while it holds the thread's
lock.  It parses the submission (command or text), runs the loop for text,
streams the answer through the thread's channel and returns the updated
session and how many mailbox entries the turn consumed (the head plus any
messages injected mid-turn).  It never touches the mailbox or lock itself:
the worker completes the turn in one atomic step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent_core.agent.commands import CommandContext, CommandRegistry, builtin_commands
from agent_core.agent.loop import (
    LoopOutcome,
    MaxIterations,
    NeedApproval,
    Response,
    Signals,
    Stopped,
    ToolRound,
    run_loop,
)
from agent_core.agent.parser import Command, is_command, parse
from agent_core.agent.reply import LockGuard, ReplyWriter, StreamingReply
from agent_core.agent.session import Session, ThreadState
from agent_core.errors import ChannelError, LockLost
from agent_core.events import EventKind, InboundEvent, OutboundMessage, ThreadKey
from agent_core.llm import errors as llm_errors
from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    LLMProvider,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from agent_core.metrics import METRICS
from agent_core.outbox import Outbox
from agent_core.settings import CoreSettings
from agent_core.store import keys
from agent_core.store.delivery import Delivery, TurnState

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are {name}, a helpful AI assistant talking with people in a chat app. "
    "Answer concisely in Markdown. Use tools when they help; never invent tool results."
)


@dataclass
class TurnResult:
    session: Session
    consumed: int
    sent_fields: list[str]
    outcome: str


def user_message_text(event: InboundEvent) -> str:
    text = event.text
    if event.attachments:
        desc = "; ".join(
            f"{a.kind} {a.name or '(unnamed)'} ({a.mime or 'unknown type'}, {a.size} bytes)"
            for a in event.attachments
        )
        text = (text + "\n\n" if text else "") + f"[attached: {desc}]"
    if not event.is_direct and event.user_name:
        text = f"{event.user_name}: {text}"
    return text


def friendly_llm_error(exc: Exception) -> str:
    if isinstance(exc, llm_errors.RateLimited):
        return "The AI model is rate limited right now. Please try again in a minute."
    if isinstance(exc, llm_errors.AuthFailed):
        return "The AI model refused our credentials. The operator needs to check the API key."
    if isinstance(exc, llm_errors.ModelNotAvailable):
        return (
            "The configured AI model is not available. The operator needs to check the model name."
        )
    if isinstance(exc, llm_errors.ContextLengthExceeded):
        return "This conversation is too long for the model. Send /new to start a fresh one."
    if isinstance(exc, llm_errors.CircuitOpen):
        return (
            "The AI model is failing right now, so I paused calls to it. Please try again shortly."
        )
    if isinstance(exc, llm_errors.Timeout):
        return "The AI model took too long to answer. Please try again."
    return "I couldn't reach the AI model just now. Please try again in a moment."


class Agent:
    def __init__(
        self,
        settings: CoreSettings,
        llm: LLMProvider,
        delivery: Delivery,
        outboxes: Mapping[str, Outbox],
        commands: CommandRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.llm = llm
        self.delivery = delivery
        self.outboxes = dict(outboxes)
        self.commands = commands or builtin_commands()
        self.system_prompt = (settings.system_prompt or DEFAULT_SYSTEM_PROMPT).replace(
            "{name}", settings.agent_name
        )
        self.turns_total = 0

    def outbox_for(self, channel: str) -> Outbox | None:
        return self.outboxes.get(channel)

    async def archive(self, session: Session) -> None:
        """Keep a copy of the history being dropped (best effort, never blocks a turn)."""
        if not session.history:
            return
        try:
            thread = ThreadKey.parse(session.thread)
            async with self.delivery.redis.pipeline(transaction=False) as pipe:
                pipe.rpush(keys.archive(thread), *[_dumps(m) for m in session.history])
                pipe.ltrim(keys.archive(thread), -2000, -1)
                pipe.expire(keys.archive(thread), self.settings.session_idle_ttl_secs)
                await pipe.execute()
        except Exception as exc:  # archive writes never block the turn
            log.warning("[%s] archive write failed: %s", session.thread, type(exc).__name__)

    async def run_turn(self, thread: ThreadKey, state: TurnState, guard: LockGuard) -> TurnResult:
        head = state.mailbox[0]
        session = Session.load(str(thread), state.session_version, state.session_data)
        outbox = self.outbox_for(head.channel)
        if outbox is None:
            log.error(
                "[%s] no outbox for channel %r; event %s dropped",
                thread,
                head.channel,
                head.event_id,
            )
            return TurnResult(session, 1, [], "no-channel")
        writer = ReplyWriter(
            outbox, self.delivery, thread, head.event_id, state.sent, guard, head.reply_ref
        )
        turn = _Turn(self, thread, state, session, writer, guard)
        started = time.perf_counter()
        outcome = await turn.run(head)
        self.turns_total += 1
        log.info(
            "[%s] turn %s for event %s: %s in %.0f ms",
            thread,
            session.turns,
            head.event_id,
            outcome,
            (time.perf_counter() - started) * 1000,
        )
        return TurnResult(session, turn.consumed, writer.fields, outcome)


class _Turn:
    """One turn's state; also the loop's delegate."""

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
        self.thread = thread
        self.state = state
        self.session = session
        self.writer = writer
        self.guard = guard
        self.consumed = 1
        self._typing: asyncio.Task[None] | None = None

    # -- entry -------------------------------------------------------------
    async def run(self, head: InboundEvent) -> str:
        outbox = self.writer.outbox
        try:
            if head.kind == EventKind.ACTION:
                await self.say_notice("That button is not active any more.")
                return "action-ignored"
            sub = parse(head.text)
            if isinstance(sub, Command):
                return await self.run_command(head, sub)
            return await self.run_text(head)
        except LockLost:
            log.warning("[%s] lock lost mid-turn; stopping without sending more", self.thread)
            raise
        finally:
            if self._typing is not None:
                self._typing.cancel()
            with contextlib.suppress(Exception):
                await outbox.turn_finished(self.thread, head)

    async def say_notice(self, text: str) -> None:
        try:
            await self.writer.say(OutboundMessage(text, notice=True))
        except ChannelError as exc:
            log.warning("[%s] could not send notice: %s", self.thread, exc)

    async def run_command(self, head: InboundEvent, cmd: Command) -> str:
        spec = self.agent.commands.get(cmd.name)
        if spec is None:
            await self.say_notice(self.agent.commands.unknown_hint(cmd.name))
            return "unknown-command"
        ctx = CommandContext(self.agent, self.session, head)
        reply = await spec.handler(ctx, cmd.args)
        if reply:
            await self.writer.say(OutboundMessage(reply))
        return f"command:{cmd.name}"

    async def run_text(self, head: InboundEvent) -> str:
        self._typing = asyncio.create_task(self._keep_typing())
        self.session.state = ThreadState.PROCESSING
        self.session.history.append(ChatMessage("user", user_message_text(head)))
        try:
            outcome: LoopOutcome = await run_loop(self, self.session.history, max_iterations=50)
        except llm_errors.LLMError as exc:
            log.warning("[%s] LLM call failed: %s: %s", self.thread, type(exc).__name__, exc)
            await self.say_notice(friendly_llm_error(exc))
            outcome = Stopped("llm-error")
        self.session.state = ThreadState.IDLE
        self.session.turns += 1
        self.session.updated_at = time.time()
        dropped = self.session.trim(self.agent.settings.max_history_messages)
        if dropped:
            archived = Session(self.session.thread, history=dropped)
            await self.agent.archive(archived)
        if isinstance(outcome, Response):
            return "response"
        if isinstance(outcome, MaxIterations):
            await self.say_notice("I stopped after too many steps without an answer.")
            return "max-iterations"
        if isinstance(outcome, NeedApproval):
            return "need-approval"
        return f"stopped:{outcome.reason}"

    async def _keep_typing(self) -> None:
        outbox = self.writer.outbox
        while True:
            with contextlib.suppress(Exception):
                await outbox.typing(self.thread)
            await asyncio.sleep(4.0)

    # -- LoopDelegate ------------------------------------------------------
    async def check_signals(self) -> Signals:
        """Inject plain messages that arrived for this thread since the turn began."""
        signals = Signals()
        if self.guard.lost:
            signals.stop = "lock-lost"
            return signals
        arrived = self.state.mailbox[self.consumed :]
        if len(arrived) == 0:
            arrived = await self.agent.delivery.peek(self.thread, self.consumed)
            self.state.mailbox.extend(arrived)
        for ev in arrived:
            if ev.kind != EventKind.MESSAGE or is_command(ev.text):
                break  # commands and button presses wait for their own turn, in order
            signals.injected.append(ChatMessage("user", user_message_text(ev)))
            self.consumed += 1
        return signals

    async def before_llm_call(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        return [ChatMessage("system", self.agent.system_prompt), *messages]

    def tools(self) -> Sequence[ToolSpec]:
        return ()

    async def call_llm(self, messages: list[ChatMessage], tools: Sequence[ToolSpec]) -> Completion:
        request = CompletionRequest(
            messages=tuple(messages),
            tools=tuple(tools),
            model=self.session.model or None,
            session_id=self.session.thread,
        )
        reply = self.writer.stream()
        self._reply = reply
        final: Completion | None = None
        async for item in self.agent.llm.stream(request):
            if isinstance(item, TextDelta):
                await reply.feed(item.text)
            else:
                final = item
        if final is None:
            raise llm_errors.InvalidResponse("stream ended without a final message")
        self.session.usage = self.session.usage + final.usage
        info = self.agent.llm.model_info(final.model or None)
        cost = info.cost(final.usage)
        self.session.cost_usd += cost
        model = final.model or info.name
        METRICS.inc("parley_llm_calls_total", model=model)
        METRICS.inc("parley_llm_tokens_total", final.usage.input, model=model, kind="input")
        METRICS.inc("parley_llm_tokens_total", final.usage.output, model=model, kind="output")
        if cost:
            METRICS.inc("parley_llm_cost_usd_total", cost, model=model)
        if final.tool_calls and reply.ref is not None:
            await reply.finish()  # keep the streamed preamble as sent
        return final

    async def handle_text(self, completion: Completion) -> None:
        reply: StreamingReply = self._reply
        text = completion.text.strip() or "(the model returned an empty answer)"
        await reply.finish(text)

    async def execute_tool_calls(self, calls: Sequence[ToolCall]) -> ToolRound:
        results = [
            ChatMessage("tool", "error: no tools are available", tool_call_id=c.id, name=c.name)
            for c in calls
        ]
        return ToolRound(results)

    async def after_iteration(self, iteration: int) -> None:
        return None


def _dumps(m: ChatMessage) -> bytes:
    import orjson

    return orjson.dumps(m.to_dict())
