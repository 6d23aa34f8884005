"""Extension hooks: a typed registry (no dispatch by name).

* ``before_inbound(event) -> event | None``  rewrite an inbound event, or drop it (None)
* ``before_tool_call(call, ctx) -> ToolCallDecision | None``  allow, block (with a
  reason the LLM hears) or replace the arguments of a tool call
* ``after_turn(info)``  observe a finished turn (outcome, usage, cost)
* ``on_session_end(session, reason)``  ``/new`` / ``/clear`` ended a conversation
  (idle expiry is a Redis TTL and fires no hook)

Hooks run in registration order; a failing hook is logged and skipped (a
before_tool_call hook that fails blocks the call: fail closed).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent_core.agent.session import Session
from agent_core.events import InboundEvent, ThreadKey
from agent_core.llm.base import ToolCall

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolCallDecision:
    block: str = ""  # non-empty: do not run; the LLM is told this reason
    arguments: dict[str, Any] | None = None  # replace the call's arguments


@dataclass(frozen=True, slots=True)
class ToolHookContext:
    thread: ThreadKey
    user: str


@dataclass(frozen=True, slots=True)
class TurnInfo:
    thread: ThreadKey
    event: InboundEvent
    outcome: str
    session: Session


BeforeInbound = Callable[[InboundEvent], Awaitable[InboundEvent | None]]
BeforeToolCall = Callable[[ToolCall, ToolHookContext], Awaitable[ToolCallDecision | None]]
AfterTurn = Callable[[TurnInfo], Awaitable[None]]
OnSessionEnd = Callable[[Session, str], Awaitable[None]]


@dataclass
class Hooks:
    before_inbound: list[BeforeInbound] = field(default_factory=list)
    before_tool_call: list[BeforeToolCall] = field(default_factory=list)
    after_turn: list[AfterTurn] = field(default_factory=list)
    on_session_end: list[OnSessionEnd] = field(default_factory=list)

    async def run_before_inbound(self, event: InboundEvent) -> InboundEvent | None:
        current: InboundEvent | None = event
        for hook in self.before_inbound:
            if current is None:
                break
            try:
                current = await hook(current)
            except Exception:
                log.exception("[%s] before_inbound hook failed; ignoring it", event.thread)
        return current

    async def run_before_tool_call(self, call: ToolCall, ctx: ToolHookContext) -> ToolCall | str:
        """The (maybe modified) call, or a block reason."""
        for hook in self.before_tool_call:
            try:
                d = await hook(call, ctx)
            except Exception:
                log.exception("[%s] before_tool_call hook failed; blocking the call", ctx.thread)
                return "blocked by a failing policy hook"
            if d is None:
                continue
            if d.block:
                return d.block
            if d.arguments is not None:
                call = ToolCall(call.id, call.name, d.arguments)
        return call

    async def run_after_turn(self, info: TurnInfo) -> None:
        for hook in self.after_turn:
            try:
                await hook(info)
            except Exception:
                log.exception("[%s] after_turn hook failed", info.thread)

    async def run_on_session_end(self, session: Session, reason: str) -> None:
        for hook in self.on_session_end:
            try:
                await hook(session, reason)
            except Exception:
                log.exception("[%s] on_session_end hook failed", session.thread)
