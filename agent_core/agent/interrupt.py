"""``/interrupt``: stopping a running turn from outside it.

The running turn holds its thread's lock, so an ``/interrupt`` queued behind
it would only run after it.  Instead the ingest pipeline notices it first
(:func:`interrupt_filter`, one of Ingest's filters): if the thread is busy it
sets ``{thread}:interrupt`` to the current time, then lets the command through
as usual.  The running turn reads that flag between loop iterations and every
0.5 s while it waits for the LLM or a tool, and stops when the flag is newer
than the turn.  The queued ``/interrupt`` then runs as its own turn: it clears
the flag and says "Nothing is running" if nothing was stopped (or cancels a
pending approval).  The turn also stops if it sees ``/interrupt`` among the
messages that arrived for it, so it works without the filter (more slowly).
"""

from __future__ import annotations

import time

from redis.asyncio import Redis

from agent_core.agent.parser import Command, parse
from agent_core.events import EventKind, InboundEvent
from agent_core.ingest import InboundFilter
from agent_core.store import keys

FLAG_TTL_MS = 600_000


def is_interrupt(text: str) -> bool:
    sub = parse(text)
    return isinstance(sub, Command) and sub.name in ("interrupt", "stop")


def interrupt_filter(redis: Redis) -> InboundFilter:
    async def flag_interrupt(event: InboundEvent) -> str | None:
        wanted = event.kind != EventKind.ACTION and event.text and is_interrupt(event.text)
        if wanted and await redis.exists(keys.lock(event.thread)):
            now = int(time.time() * 1000)
            await redis.set(keys.interrupt(event.thread), now, px=FLAG_TTL_MS)
        return None

    return flag_interrupt
