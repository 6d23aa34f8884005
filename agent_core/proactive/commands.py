"""`/routine` and `/heartbeat`: admin commands, added to the agent's command registry.

Only people in ``ADMIN_IDS`` (and the local terminal, `parley chat`, which is
the operator's own) may use them; everyone else gets a one-line refusal.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, cast

from agent_core.proactive.routines import (
    ADD_USAGE,
    RoutineError,
    RoutineStore,
    parse_add,
    validate,
)
from agent_core.store import keys

if TYPE_CHECKING:
    from agent_core.agent.commands import CommandContext, CommandRegistry

NOT_ADMIN = "Only an admin (ADMIN_IDS) can manage routines and the heartbeat."
ROUTINE_USAGE = (
    "`/routine list` · `/routine show NAME` · `/routine pause|resume|remove|run NAME` · "
    f"`/routine add {ADD_USAGE}`"
)


HEARTBEAT_USAGE = "`/heartbeat` (the status) · `/heartbeat set <checklist>` · `/heartbeat clear`"


def _subcommand(args: str) -> tuple[str, str]:
    """``'set\n- item'`` -> ('set', '- item'): the subcommand ends at any whitespace
    (a checklist naturally starts on the next line)."""
    parts = args.strip().split(None, 1)
    if not parts:
        return "", ""
    return parts[0].lower(), (parts[1].strip() if len(parts) > 1 else "")


def is_admin(ctx: CommandContext) -> bool:
    return ctx.event.qualified_user in ctx.agent.admin_ids or ctx.event.channel == "console"


def _store(ctx: CommandContext) -> RoutineStore:
    return RoutineStore(ctx.agent.redis, history=ctx.agent.settings.routine_run_history)


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if ts else "never"


async def routine_command(ctx: CommandContext, args: str) -> str:
    if not is_admin(ctx):
        return NOT_ADMIN
    sub, rest = _subcommand(args)
    store = _store(ctx)
    if sub in ("", "help"):
        return ROUTINE_USAGE
    if sub == "list":
        return await list_text(store)
    if sub == "add":
        try:
            r = parse_add(
                rest,
                created_by=ctx.event.qualified_user,
                default_tz=ctx.agent.settings.routine_timezone,
            )
            validate(r)
        except RoutineError as exc:
            return f"Not added: {exc}"
        if not await store.add(r):
            return f"Not added: a routine named `{r.name}` exists (remove it first)."
        return f"Added routine `{r.name}`: {r.describe_trigger()}, {r.action} → {r.notify}."
    if not rest:
        return f"Which routine? `/routine {sub} NAME`"
    name = rest.split()[0].lower()
    if sub == "show":
        return await show_text(store, name)
    if sub in ("pause", "resume"):
        changed = await store.set_enabled(name, sub == "resume")
        if changed is None:
            return f"No routine named `{name}`."
        return f"Routine `{name}` {'resumed' if changed.enabled else 'paused'}."
    if sub == "remove":
        ok = await store.remove(name)
        return f"Removed routine `{name}`." if ok else f"No routine named `{name}`."
    if sub == "run":
        if await store.get(name) is None:
            return f"No routine named `{name}`."
        await store.queue_run(name, "manual")
        return f"Routine `{name}` queued; it runs within a few seconds."
    return f"Unknown subcommand `{sub}`. " + ROUTINE_USAGE


async def list_text(store: RoutineStore) -> str:
    routines = await store.all()
    if not routines:
        return "No routines yet. `/routine add …` creates one."
    rows = ["**Routines**"]
    for r in routines:
        st = await store.state(r.name)
        state = "" if r.enabled else " _(paused)_"
        last = f"; last {_when(st.last_run)}: {st.outcome}" if st.last_run else ""
        rows.append(f"- `{r.name}`{state} — {r.describe_trigger()}, {r.action} → {r.notify}{last}")
    return "\n".join(rows)


async def show_text(store: RoutineStore, name: str) -> str:
    r = await store.get(name)
    if r is None:
        return f"No routine named `{name}`."
    st = await store.state(r.name)
    lines = [
        f"**Routine `{r.name}`**{'' if r.enabled else ' (paused)'}",
        f"- trigger: {r.describe_trigger()}",
        f"- action: {r.action} → {r.notify}",
        f"- prompt: {r.prompt}",
        f"- created by {r.created_by or '?'} at {_when(r.created_at)}",
    ]
    if r.trigger == "cron" and r.enabled:
        with contextlib.suppress(Exception):
            lines.append(f"- next run: {_when(r.next_fire(max(time.time(), st.last_fire)))}")
    lines.append(
        f"- last run: {_when(st.last_run)}"
        + (f" — {st.outcome} ({st.duration:.2f} s)" if st.last_run else "")
        + f"; {st.runs} run(s) in all"
    )
    runs = await store.runs(r.name, 5)
    if runs:
        lines.append("- recent:")
        lines += [f"  - {_when(x.at)} [{x.trigger}] {x.outcome} ({x.duration:.2f} s)" for x in runs]
    return "\n".join(lines)


async def heartbeat_command(ctx: CommandContext, args: str) -> str:
    if not is_admin(ctx):
        return NOT_ADMIN
    sub, text = _subcommand(args)
    redis = ctx.agent.redis
    s = ctx.agent.settings
    if sub == "set":
        if not text:
            return "Usage: `/heartbeat set <checklist>` (`/heartbeat clear` goes back to the file)."
        await redis.set(keys.HEARTBEAT_CHECKLIST, text)
        return "Heartbeat checklist set." + (
            "" if s.heartbeat_enabled else " (The heartbeat is off: set HEARTBEAT_ENABLED=true.)"
        )
    if sub == "clear":
        await redis.delete(keys.HEARTBEAT_CHECKLIST)
        return f"Heartbeat checklist cleared (the file {s.heartbeat_file} is used if present)."
    if sub not in ("", "show", "status"):
        return f"Unknown subcommand `{sub}`. " + HEARTBEAT_USAGE
    raw = await redis.get(keys.HEARTBEAT_CHECKLIST)
    raw_state = cast(dict[bytes, bytes], await redis.hgetall(keys.HEARTBEAT_STATE))
    st = {k.decode(): v.decode() for k, v in raw_state.items()}
    source = "set from chat" if raw is not None else f"file {s.heartbeat_file}"
    lines = [
        f"**Heartbeat:** {'on' if s.heartbeat_enabled else 'off'}, every "
        f"{s.heartbeat_interval_secs:g} s → {s.heartbeat_notify or 'admins'}",
        f"- checklist: {source}",
    ]
    if st.get("at"):
        lines.append(
            f"- last check: {_when(float(st['at']))}: {st.get('outcome', '?')}"
            f" ({st.get('failures', '0')} failure(s) in a row)"
        )
    if raw is not None:
        lines.append("\n" + (raw.decode() if isinstance(raw, bytes) else str(raw)))
    return "\n".join(lines)


def register(reg: CommandRegistry) -> None:
    reg.add(
        "routine",
        "manage routines (admins)",
        routine_command,
        "list|add|show|pause|resume|remove|run",
    )
    reg.add(
        "heartbeat",
        "show or set the heartbeat checklist (admins)",
        heartbeat_command,
        "[set …|clear]",
    )
