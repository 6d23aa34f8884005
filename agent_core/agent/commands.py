"""Slash commands: a typed registry, not name-based dispatch.

A command is a function ``(ctx, args) -> reply text | None`` registered under
its name with one help line.  Unknown commands get a one-line hint and never
reach the LLM (no hint for a group command not addressed to the bot, which may
be another bot's: ``Turn.run_command``).  Commands run inside a turn (the thread
lock is held); their session changes are saved by the worker's completion script.
"""

from __future__ import annotations

import asyncio
import difflib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_core.agent.budget import BudgetRefused
from agent_core.agent.session import Session, ThreadState
from agent_core.events import InboundEvent, ThreadKey
from agent_core.llm.base import ChatMessage, TokenUsage
from agent_core.proactive.commands import register as register_proactive_commands

if TYPE_CHECKING:
    from agent_core.agent.agent import Agent
    from agent_core.agent.turn import Turn


@dataclass
class CommandContext:
    agent: Agent
    session: Session
    event: InboundEvent
    turn: Turn | None = None
    # set by a command that replaced the session (e.g. /new)
    replaced: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def thread(self) -> ThreadKey:
        return ThreadKey.parse(self.session.thread)

    def the_turn(self) -> Turn:
        assert self.turn is not None, "this command needs a running turn"
        return self.turn


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

    def menu(self) -> list[tuple[str, str, str]]:
        """(name, one-line description, usage) of every command, for a platform's
        command menu; usage is "" for a command that takes nothing."""
        return [(n, self._commands[n].help, self._commands[n].usage) for n in self.names()]

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


# --- the built-ins --------------------------------------------------------------
async def _help(ctx: CommandContext, args: str) -> str:
    return (
        f"I'm {ctx.agent.settings.agent_name}, an AI assistant. Write to me in plain words.\n\n"
        + ctx.agent.commands.help_text()
    )


async def _start(ctx: CommandContext, args: str) -> str:
    # Telegram sends /start when someone opens the bot (START), and "/start <payload>"
    # from a t.me/<bot>?start=... link; the payload is not used.
    return (
        f"Hi! I'm {ctx.agent.settings.agent_name}, an AI assistant. Write to me in plain "
        "words and I'll answer here. Send /help for the commands."
    )


async def _end_conversation(ctx: CommandContext, reason: str) -> str:
    note = ""
    turn = ctx.turn
    if turn is not None and await turn.cancel_pending(ctx.event):
        note = " The pending approval was cancelled."
    if ctx.session.held:
        note += f" {len(ctx.session.held)} message(s) waiting for it were dropped."
    await ctx.agent.hooks.run_on_session_end(ctx.session, reason)
    return note


async def _refusal(ctx: CommandContext) -> str:
    """'' unless an approval is pending that this sender may not cancel."""
    return await ctx.turn.pending_refusal(ctx.event) if ctx.turn is not None else ""


def _group_refusal(ctx: CommandContext, what: str) -> str:
    """'' unless this is a group conversation, approvers or admins are configured and
    the sender is neither: then what changes the conversation for everyone there
    (/new, /clear, /undo, /redo, /model NAME, /agent NAME, /agent reload) is theirs.
    With none configured anyone may (else nobody could); direct chats are unchanged."""
    if ctx.agent.may_change_shared(ctx.event):
        return ""
    return f"Only an approver or an admin can {what}."


async def _new(ctx: CommandContext, args: str) -> str:
    if refused := _group_refusal(ctx, "start a new conversation in this group"):
        return refused
    if refused := await _refusal(ctx):
        return refused
    note = await _end_conversation(ctx, "new")
    await ctx.agent.undo.checkpoint(ctx.thread, ctx.event.event_id, ctx.session)
    await ctx.agent.archive(ctx.session)
    s = ctx.session
    s.history.clear()
    s.held.clear()
    s.summary = ""
    s.always_approved.clear()
    s.pending_approval = ""
    s.resume = {}
    s.state = ThreadState.IDLE
    s.conversation += 1
    # /cost and /status speak of this conversation: the old one's figures go with it
    s.usage, s.cost_usd, s.last_prompt_tokens, s.token_ratio = TokenUsage(), 0.0, 0, 1.0
    ctx.replaced = True
    return "Started a new conversation. What's on your mind?" + note


async def _clear(ctx: CommandContext, args: str) -> str:
    if refused := _group_refusal(ctx, "clear this group's conversation"):
        return refused
    if refused := await _refusal(ctx):
        return refused
    note = await _end_conversation(ctx, "clear")
    await ctx.agent.undo.checkpoint(ctx.thread, ctx.event.event_id, ctx.session)
    s = ctx.session
    s.history.clear()
    s.held.clear()
    s.summary = ""
    s.always_approved.clear()
    s.pending_approval = ""
    s.resume = {}
    s.state = ThreadState.IDLE
    return "Cleared the conversation history (/undo brings it back)." + note


async def _undo(ctx: CommandContext, args: str) -> str:
    # it rewinds the shared history (whoever's turn was last), like /clear
    if refused := _group_refusal(ctx, "undo in this group's conversation"):
        return refused
    if refused := await _refusal(ctx):
        return refused
    note = ""
    if ctx.turn is not None and await ctx.turn.cancel_pending(ctx.event):
        note = " (The pending approval was cancelled.)"
    # The messages held for the cancelled approval go with it, as with /new and
    # /clear: they were written about the turn being undone (answering them would act
    # on it after all); the reply says how many, so they can be sent again.
    if ctx.session.held:
        note += f" {len(ctx.session.held)} message(s) waiting for it were dropped."
        ctx.session.held.clear()
    if not await ctx.agent.undo.undo(ctx.thread, ctx.event.event_id, ctx.session):
        return "Nothing to undo." + note
    u, r = await ctx.agent.undo.depth(ctx.thread)
    return f"Undone: back to before the last turn. ({u} more to undo, {r} to redo)" + note


async def _redo(ctx: CommandContext, args: str) -> str:
    if refused := _group_refusal(ctx, "redo in this group's conversation"):
        return refused
    if ctx.session.state == ThreadState.AWAITING_APPROVAL:
        return "Decide the pending approval first (or /undo to cancel it)."
    if not await ctx.agent.undo.redo(ctx.thread, ctx.event.event_id, ctx.session):
        return "Nothing to redo."
    u, r = await ctx.agent.undo.depth(ctx.thread)
    return f"Redone. ({u} to undo, {r} more to redo)"


async def _compact(ctx: CommandContext, args: str) -> str:
    if ctx.session.state == ThreadState.AWAITING_APPROVAL:
        return "Decide the pending approval first."
    turn = ctx.the_turn()
    window = ctx.agent.window_for(turn.model() or None)
    fixed = turn.fixed_tokens(ChatMessage("system", turn.system_prompt()))
    try:
        res = await ctx.agent.compactor.compact(
            ctx.session,
            ctx.session.history,
            window,
            system_tokens=fixed,
            force="summarise",
            meter=turn.meter(),
        )
    except BudgetRefused as exc:
        return str(exc)
    if res is None:
        return "Nothing to compact yet."
    return (
        f"Compacted ({res.strategy}): {res.dropped} older messages out, "
        f"about {res.before:,} → {res.after:,} tokens."
    )


async def _interrupt(ctx: CommandContext, args: str) -> str | None:
    from agent_core.agent.interrupt import RUNNING, stop_reply
    from agent_core.store import keys

    redis = ctx.agent.redis
    flag = await redis.getdel(keys.interrupt(ctx.thread))
    # cancelling is deciding, whatever the flag says (a stopped turn's flag may be
    # left over: a /stop refused by the rate limit never took it)
    if refused := await _refusal(ctx):
        return refused
    cancelled = ctx.turn is not None and await ctx.turn.cancel_pending(ctx.event)
    # The messages held for the cancelled approval go with it, as with /undo, /new
    # and /clear (else the next turn would answer them as if just sent); the reply
    # says how many, so they can be sent again.
    note = ""
    if ctx.session.held:
        note = f" {len(ctx.session.held)} message(s) waiting for it were dropped."
        ctx.session.held.clear()
    if cancelled:
        return "Stopped: the pending approval was cancelled." + note
    running = ctx.session.extra.get(RUNNING)
    reply = stop_reply(flag, ctx.event.qualified_user, running, ctx.agent.approver_ids)
    if note:  # a wait ended by a decided but given-up turn (cancel_pending settles it)
        return reply + note if reply else note.lstrip()
    return reply


def _fill(ctx: CommandContext) -> tuple[int, int, int]:
    from agent_core.agent.tokens import estimate

    turn = ctx.the_turn()
    window = ctx.agent.window_for(turn.model() or None)
    # as /context and compaction count it: the system prompt (with the summary) and
    # the tools' specs too
    system = ChatMessage("system", turn.system_prompt())
    est = estimate(ctx.session.history, ctx.session.token_ratio) + turn.fixed_tokens(system)
    return est, window, round(100 * est / max(1, window))


async def _status(ctx: CommandContext, args: str) -> str:
    s = ctx.session
    turn = ctx.the_turn()
    est, window, pct = _fill(ctx)
    lines = [
        f"**State:** {s.state.value.replace('_', ' ')}",
        f"**Model:** {turn.model() or ctx.agent.llm.name}",
        f"**Agent:** {turn.profile().name}",
        f"**Context:** ~{est:,} of {window:,} tokens ({pct}%), {len(s.history)} messages",
        f"**Cost:** ${s.cost_usd:.4f} this conversation",
    ]
    if s.usage.cache_read or s.usage.cache_write:
        lines.append(f"**Prompt cache:** {_cached_pct(s.usage)}% of prompt tokens read from it")
    if ctx.agent.budget.enabled:
        sp = await ctx.agent.budget.spend(ctx.event.qualified_user)
        lines.append(f"**Today:** ${sp.user_usd:.4f} you, ${sp.day_usd:.4f} everyone")
    if s.state == ThreadState.AWAITING_APPROVAL:
        lines.append(f"**Waiting for:** approval `{s.pending_approval}`")
    if mine := s.always_tools(ctx.event.qualified_user):
        lines.append(f"**Always approved (for you):** {', '.join(sorted(mine))}")
    return "\n".join(lines)


def _cached_pct(u: TokenUsage) -> int:
    return round(100 * u.cache_read / max(1, u.prompt))


async def _cost(ctx: CommandContext, args: str) -> str:
    s = ctx.session
    u = s.usage
    lines = [
        f"This conversation: ${s.cost_usd:.4f} ({u.prompt:,} prompt + {u.output:,} output tokens)."
    ]
    if u.cache_read or u.cache_write:
        # the provider's prompt cache (Anthropic: cache_control; OpenAI: automatic)
        lines.append(
            f"Prompt cache: {u.cache_read:,} of the {u.prompt:,} prompt tokens "
            f"({_cached_pct(u)}%) were read from it, at a fraction of the input price"
            + (f"; {u.cache_write:,} were written to it." if u.cache_write else ".")
        )
    sp = await ctx.agent.budget.spend(ctx.event.qualified_user)
    lines.append(f"Today (UTC): ${sp.user_usd:.4f} by you, ${sp.day_usd:.4f} by everyone.")
    st = ctx.agent.settings
    if st.daily_budget_usd or st.user_daily_budget_usd:
        lines.append(
            f"Budgets: ${st.daily_budget_usd:.2f} per day for everyone, "
            f"${st.user_daily_budget_usd:.2f} per person (0 = none)."
        )
    return "\n".join(lines)


async def _context(ctx: CommandContext, args: str) -> str:
    from agent_core.agent.tokens import by_role, estimate, tools_tokens

    turn = ctx.the_turn()
    system = ChatMessage("system", turn.system_prompt())
    ratio = ctx.session.token_ratio
    roles = by_role([system, *ctx.session.history], ratio)
    roles["tools"] = int(tools_tokens(turn.tools()) * ratio)  # their specs
    window = ctx.agent.window_for(turn.model() or None)
    total = estimate(ctx.session.history, ratio) + turn.fixed_tokens(system)
    lines = [
        f"**Context:** ~{total:,} of {window:,} tokens ({round(100 * total / max(1, window))}%)",
        *(f"- {role}: ~{n:,}" for role, n in roles.items()),
        f"Provider-reported prompt on the last call: {ctx.session.last_prompt_tokens:,} tokens"
        if ctx.session.last_prompt_tokens
        else "No provider-reported usage yet.",
        "Compaction at 80% (move), 85% (summarise), 95% (truncate)."
        + (" A summary of older turns is in use." if ctx.session.summary else ""),
    ]
    return "\n".join(lines)


async def _model(ctx: CommandContext, args: str) -> str:
    from agent_core.errors import ConfigError

    name = args.strip()
    turn = ctx.the_turn()
    if not name:
        try:
            models = await asyncio.wait_for(ctx.agent.llm.list_models(), 10)
        except Exception:
            models = []
        current = turn.model() or ctx.agent.llm.name
        listed = "\n".join(f"- `{m}`" for m in models[:30]) or "(the provider did not list any)"
        return f"Current model: `{current}`\n\nAvailable:\n{listed}\n\n`/model default` resets."
    if refused := _group_refusal(ctx, "switch this group's model"):
        return refused
    if name in ("default", "reset"):
        ctx.session.model = ""
        return "Back to the default model."
    try:
        note = ctx.agent.check_window(name)
    except ConfigError as exc:
        return f"Can't switch: {exc.problems[0]}"
    try:
        models = await asyncio.wait_for(ctx.agent.llm.list_models(), 10)
    except Exception:
        models = []  # the provider cannot say: taken as given
    if models and name not in models:
        close = difflib.get_close_matches(name, models, n=3)
        hint = ", ".join(f"`{m}`" for m in close)
        return (
            f"Can't switch: `{name}` is not one of the provider's models"
            + (f" (did you mean {hint}?)" if hint else "")
            + ". Send /model for the list."
        )
    ctx.session.model = name
    return f"Switched this conversation to `{name}`." + (f" ({note})" if note else "")


async def _agent(ctx: CommandContext, args: str) -> str:
    name = args.strip().lower()
    profiles = ctx.agent.profiles
    if name == "reload":
        if refused := _group_refusal(ctx, "reload the agent profiles from a group"):
            return refused
        n = await asyncio.to_thread(profiles.load)
        errs = "".join(f"\n- {e}" for e in profiles.errors)
        return f"Reloaded {n} agent profile(s)." + errs
    if not name:
        current = ctx.the_turn().profile().name
        rows = [
            f"- `{p.name}`{' (current)' if p.name == current else ''}"
            + (f" — {p.description}" if p.description else "")
            for p in profiles.all()
        ]
        return "**Agents**\n" + "\n".join(rows) + "\n\n`/agent NAME` switches, `/agent reload`."
    if refused := _group_refusal(ctx, "switch this group's agent"):
        return refused
    if not profiles.has(name):
        return f"No agent named `{name}`. Send /agent for the list."
    if ctx.session.state == ThreadState.AWAITING_APPROVAL:
        # the approved call would run under the other profile's tools and prompt
        return "Decide the pending approval first (or /deny it), then switch."
    ctx.session.profile = "" if name == profiles.default.name else name
    return f"Now talking as `{name}`."


async def _tools(ctx: CommandContext, args: str) -> str:
    from agent_core.tools.base import Approval

    turn = ctx.the_turn()
    rows = []
    mine = ctx.session.always_tools(ctx.event.qualified_user)
    for name in turn.offered():
        tool = ctx.agent.tools.get(name)
        if tool is None:
            continue
        pol = type(tool).approval
        if name in mine:
            how = "you approved it for this conversation"
        elif pol is Approval.NEVER:
            how = "no approval"
        elif pol is Approval.ALWAYS:
            how = "asks first"
        else:
            how = "asks first for some arguments"
        rows.append(f"- `{name}` — {tool.description} _({how})_")
    return "**Tools**\n" + ("\n".join(rows) or "(none)")


async def _always(ctx: CommandContext, args: str) -> str:
    """``/always``: the tools you approved with Always here; ``/always off [tool]``
    withdraws one (or all of yours); an approver's ``/always off everyone`` withdraws
    everyone's.  The history stays; the tool asks again next time."""
    s = ctx.session
    me = ctx.event.qualified_user
    mine = s.always_tools(me)
    words = args.split()
    if not words:
        if not mine:
            return (
                "You have approved nothing for good in this conversation. **Always** on an "
                "approval prompt lets that tool run for you without asking, until you "
                "withdraw it (`/always off <tool>`) or start over (/new, /clear)."
            )
        listed = ", ".join(f"`{t}`" for t in sorted(mine))
        return (
            f"You approved for good here: {listed}. `/always off <tool>` withdraws one, "
            "`/always off` all of them."
        )
    if words[0].lower() != "off" or len(words) > 2:
        return "Usage: `/always` (list), `/always off <tool>`, `/always off` (all yours)."
    target = words[1] if len(words) == 2 else ""
    if target.lower() == "everyone":
        if me not in ctx.agent.approver_ids and me not in ctx.agent.admin_ids:
            return "Only an approver or an admin can withdraw everyone's Always."
        n = len(s.always_approved)
        s.always_approved.clear()
        return f"Withdrew every Always in this conversation ({n}). Those tools ask again."
    if not target:
        if not mine:
            return "You have approved nothing for good in this conversation."
        for tool in mine:
            s.always_approved.discard(f"{me}|{tool}")
        return f"Withdrawn: {', '.join(f'`{t}`' for t in sorted(mine))}. They ask again."
    if target not in mine:
        have = f" (yours: {', '.join(f'`{t}`' for t in sorted(mine))})" if mine else ""
        return f"You have no Always for `{target}` here{have}."
    s.always_approved.discard(f"{me}|{target}")
    return f"Withdrawn: `{target}` asks again next time."


async def _ping(ctx: CommandContext, args: str) -> str:
    return "pong"


async def _version(ctx: CommandContext, args: str) -> str:
    from agent_core import __version__

    return f"Parley {__version__}"


_APPROVAL_ID = re.compile(r"[A-Za-z0-9_\-]{12}")


def _split_id(args: str, session: Session) -> tuple[str, str]:
    """``[id] rest``: the first word is an approval id only if it is the pending one
    or looks like one (12 url-safe characters, not a plain lowercase word), so
    ``/deny expensive`` is a reason, not an unknown id."""
    parts = args.split(None, 1)
    if parts:
        word = parts[0]
        if word == session.pending_approval or (
            _APPROVAL_ID.fullmatch(word) and not (word.isalpha() and word.islower())
        ):
            return word, (parts[1] if len(parts) > 1 else "")
    return session.pending_approval, args


async def _approve(ctx: CommandContext, args: str) -> None:
    aid, rest = _split_id(args, ctx.session)
    decision = "always" if rest.strip().lower() == "always" else "approve"
    named = args.split()[:1] == [aid]
    await ctx.the_turn().decide(ctx.event, aid, decision, button=False, named=named)


async def _deny(ctx: CommandContext, args: str) -> None:
    aid, rest = _split_id(args, ctx.session)
    pending = ctx.session.pending_approval
    # "/deny Unacceptable": a word shaped like an id that names no approval of this
    # conversation is the reason, and the pending request is denied.
    if pending and aid != pending and await ctx.agent.approvals.load(ctx.thread, aid) is None:
        aid, rest = pending, args
    reason = rest.strip().removeprefix("because").strip()
    named = args.split()[:1] == [aid]
    await ctx.the_turn().decide(ctx.event, aid, "deny", reason, button=False, named=named)


def builtin_commands() -> CommandRegistry:
    reg = CommandRegistry()
    reg.add("help", "what I can do and the commands I understand", _help)
    reg.add("start", "say hello (what Telegram's START button sends)", _start)
    reg.add("new", "start a new conversation (the old one is archived)", _new)
    reg.add("clear", "forget this conversation's history", _clear)
    reg.add("undo", "go back to before the last turn", _undo)
    reg.add("redo", "re-apply what /undo took back", _redo)
    reg.add("compact", "summarise older turns now to free context", _compact)
    reg.add("interrupt", "stop the turn that is running", _interrupt)
    reg.add("stop", "the same as /interrupt", _interrupt)
    reg.add("status", "state, model, context fill and cost", _status)
    reg.add("cost", "what this conversation and today cost", _cost)
    reg.add("context", "how full the model's context is, by role", _context)
    reg.add("model", "list models, or switch this conversation's model", _model, "[name]")
    reg.add("agent", "list agent profiles, or switch to one", _agent, "[name]")
    reg.add("tools", "the tools I can use and which ask first", _tools)
    reg.add(
        "always",
        "list or withdraw the tools you approved for good",
        _always,
        "[off [tool|everyone]]",
    )
    reg.add("ping", "check that I'm alive", _ping)
    reg.add("version", "Parley's version", _version)
    reg.add("approve", "approve the pending action", _approve, "[id] [always]")
    reg.add("deny", "deny the pending action", _deny, "[id] [reason]")
    register_proactive_commands(reg)  # proactive (issue 12): /routine, /heartbeat
    return reg
