"""Slash commands: a typed registry, not name-based dispatch.

A command is a function ``(ctx, args) -> reply text | None`` registered under
its name with one help line.  Unknown commands get a one-line hint and never
reach the LLM.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_core.agent.session import Session
from agent_core.events import InboundEvent

if TYPE_CHECKING:
    from agent_core.agent.agent import Agent


@dataclass
class CommandContext:
    agent: Agent
    session: Session
    event: InboundEvent
    # set by a command that replaced the session (e.g. /new)
    replaced: bool = False
    notes: list[str] = field(default_factory=list)


Handler = Callable[[CommandContext, str], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    name: str
    help: str
    handler: Handler
    usage: str = ""


class CommandRegistry:
    def __init__(self) -> None:
        self._commands: dict[str, CommandSpec] = {}

    def add(self, name: str, help: str, handler: Handler, usage: str = "") -> None:
        self._commands[name] = CommandSpec(name, help, handler, usage)

    def get(self, name: str) -> CommandSpec | None:
        return self._commands.get(name)

    def names(self) -> list[str]:
        return sorted(self._commands)

    def help_text(self) -> str:
        lines = ["**Commands**"]
        for name in self.names():
            spec = self._commands[name]
            usage = f" {spec.usage}" if spec.usage else ""
            lines.append(f"- `/{name}{usage}` — {spec.help}")
        return "\n".join(lines)

    def unknown_hint(self, name: str) -> str:
        close = [n for n in self.names() if n.startswith(name[:2])] if name else []
        hint = f" Did you mean /{close[0]}?" if close else ""
        return f"Unknown command /{name}.{hint} Send /help for the list."


async def _help(ctx: CommandContext, args: str) -> str:
    return (
        f"I'm {ctx.agent.settings.agent_name}, an AI assistant. Write to me in plain words.\n\n"
        + ctx.agent.commands.help_text()
    )


async def _new(ctx: CommandContext, args: str) -> str:
    await ctx.agent.archive(ctx.session)
    ctx.session.history.clear()
    ctx.session.always_approved.clear()
    ctx.session.pending_approval = ""
    ctx.session.conversation += 1
    ctx.replaced = True
    return "Started a new conversation. What's on your mind?"


def builtin_commands() -> CommandRegistry:
    reg = CommandRegistry()
    reg.add("help", "what I can do and the commands I understand", _help)
    reg.add("new", "start a new conversation (forget this one)", _new)
    return reg
