"""``/interrupt``: stopping a running turn from outside it.

The running turn holds its thread's lock, so an ``/interrupt`` queued behind
it would only run after it.  Instead the ingest pipeline notices it first
(:func:`interrupt_filter`, one of Ingest's filters): if the thread is busy and
the event is not a copy of one already taken in (a redelivery), it sets
``{thread}:interrupt`` to the current time, then lets the command through as usual.  The running turn reads that flag between loop iterations and every
0.5 s while it waits for the LLM or a tool, and stops when the flag is newer
than the turn.  The 0.5 s reads are shared: one :class:`InterruptWatch` per
process reads the flags of every waiting turn in one round trip per tick (a
poll per turn cost ~4 GETs per 2 s LLM call, per turn held: thousands a
second at a thousand turns in flight).  The queued ``/interrupt`` then runs as
its own turn: it clears the flag and says nothing if its sender's turn was stopped
(the flag reads ``x|<sender>``), "Only <name> or an approver can stop this turn"
if it came while someone else's turn ran, else "Nothing is running" (or cancels a
pending approval, if its sender may).  The turn also stops if it sees ``/interrupt``
among the messages that arrived for it after it began, so it works without the
filter (more slowly); one queued before the turn began waits for its own turn.
A thread held back for a platform's rate limit (its turn handed back: the lock is
a ``~later`` hold) counts as busy: its flag lives as long as the hold, and the
rerun of the handed-back message heeds a flag (or a queued ``/interrupt``) from
since the hand-back (``agent_core.agent.signals.stop_if_stopped_while_held``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.agent.parser import Command, parse
from agent_core.events import EventKind, InboundEvent
from agent_core.ingest import InboundFilter
from agent_core.store import keys
from agent_core.store.wire import roundtrip

log = logging.getLogger(__name__)

FLAG_TTL_MS = 600_000
POLL_SECS = 0.5
BATCH = 500  # flags read per round trip
CONSUMED = "x"  # the flag after a turn stopped and said so: ``x|<who stopped it>``
RUNNING = "run"  # session.extra: [user, display name, start ms] of the last loop turn


def flag_is_newer(
    raw: bytes | None, since_ms: int, may: Callable[[str], bool] = lambda _user: True
) -> bool:
    """``{thread}:interrupt`` holds ``<ms>|<sender>`` ("x": consumed) at or after
    ``since_ms``, set by someone ``may`` accepts (a bare ``<ms>`` names nobody)."""
    if not raw:
        return False
    at, _, user = raw.decode(errors="replace").partition("|")
    try:
        return int(at) >= since_ms and may(user)
    except ValueError:
        return False


def flag_user(raw: bytes | str | None) -> str:
    """Who set ``{thread}:interrupt`` ('' when it names nobody)."""
    if not raw:
        return ""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    return text.partition("|")[2]


def stop_reply(
    flag: bytes | str | None, user: str, running: object, approvers: Collection[str]
) -> str | None:
    """What ``user``'s /interrupt says when it cancelled nothing, given the flag it
    took (``GETDEL``) and the last loop turn recorded on the session (``running``:
    ``[user, name, start ms]``): nothing when the turn it stopped already said so
    (``x|<user>``: only for the person who stopped it); whose turn it was when it
    came while someone else's turn ran, which it may not stop; else that nothing
    runs."""
    text = flag.decode(errors="replace") if isinstance(flag, bytes) else flag or ""
    at, _, by = text.partition("|")
    if at == CONSUMED and by == user:
        return None  # the running turn already said it stopped
    if at.isdigit() and by == user and isinstance(running, list) and len(running) == 3:
        owner, name, started = running
        busy_since = int(started) if isinstance(started, int | float) else 0
        if owner and owner != user and user not in approvers and 0 < busy_since <= int(at):
            who = name or "the person whose turn it was"
            return f"Only {who} or an approver can stop this turn."
    return "Nothing is running right now."


def is_interrupt(text: str) -> bool:
    sub = parse(text)
    return isinstance(sub, Command) and sub.name in ("interrupt", "stop")


def interrupt_filter(redis: Redis) -> InboundFilter:
    async def flag_interrupt(event: InboundEvent) -> str | None:
        wanted = (
            event.kind in (EventKind.MESSAGE, EventKind.COMMAND)
            and event.text
            and is_interrupt(event.text)
        )
        if not wanted:
            return None
        # A copy of an /interrupt that already got in (a platform's redelivery, the
        # web page re-posting) must not stop the turn running now: that turn came
        # later, and the copy is dropped as a duplicate right after this filter.
        seen, lock_ttl = await roundtrip(
            redis,
            [
                ("EXISTS", keys.dedup(event.channel, event.event_id)),
                ("PTTL", keys.lock(event.thread)),  # -2: no lock, nothing runs
            ],
        )
        if lock_ttl != -2 and not seen:
            # who asked goes with it: the running turn stops only for its own person
            # or an approver (stopping a turn is deciding it, like cancelling one).
            # It lives as long as the lock too: a thread held for a platform's wait
            # (a turn handed back, up to an hour) reruns after it, and heeds it then.
            flag = f"{int(time.time() * 1000)}|{event.qualified_user}"
            ttl = FLAG_TTL_MS + max(int(lock_ttl), 0)
            await redis.set(keys.interrupt(event.thread), flag, px=ttl)
        return None

    return flag_interrupt


@dataclass(eq=False)
class Watch:
    """One waiting turn: ``fired`` completes on ``/interrupt`` or a lost lock."""

    key: str
    since_ms: int
    lost: Callable[[], bool]
    may: Callable[[str], bool] = lambda _user: True  # whose /interrupt stops it
    fired: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    by: str = ""  # whose /interrupt fired it

    def fire(self) -> None:
        if not self.fired.done():
            self.fired.set_result(None)


class InterruptWatch:
    """Every ``POLL_SECS``, one round trip reads the interrupt flags of all the
    turns of this process that wait on the LLM or a tool (and checks their locks).
    The loop runs only while someone is watching."""

    def __init__(self, redis: Redis, poll_secs: float = POLL_SECS) -> None:
        self.redis = redis
        self.poll_secs = poll_secs
        self.watches: set[Watch] = set()
        self._task: asyncio.Task[None] | None = None

    def watch(
        self,
        key: str,
        since_ms: int,
        lost: Callable[[], bool],
        may: Callable[[str], bool] = lambda _user: True,
    ) -> Watch:
        w = Watch(key, since_ms, lost, may)
        self.watches.add(w)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="interrupt watch")
        return w

    def unwatch(self, w: Watch) -> None:
        self.watches.discard(w)

    async def _run(self) -> None:
        while self.watches:
            await asyncio.sleep(self.poll_secs)
            try:
                await self.poll_once()
            except (RedisError, OSError):
                pass  # the next tick tries again
            except Exception:
                log.exception("interrupt watch: poll failed")

    async def poll_once(self) -> None:
        waiting = []
        for w in list(self.watches):
            if w.lost():
                w.fire()
            elif not w.fired.done():
                waiting.append(w)
        keys_ = sorted({w.key for w in waiting})
        flags: dict[str, bytes | None] = {}
        for i in range(0, len(keys_), BATCH):
            chunk = keys_[i : i + BATCH]
            replies = await roundtrip(self.redis, [("GET", k) for k in chunk])
            for k, r in zip(chunk, replies, strict=True):
                flags[k] = r if isinstance(r, bytes) else None
        for w in waiting:
            if flag_is_newer(flags.get(w.key), w.since_ms, w.may):
                w.by = flag_user(flags.get(w.key))
                w.fire()
