"""The Redis side of delivery: stream, mailboxes, locks, completion.

This module holds no policy, only the atomic steps of the design in
docs/architecture.md ("Delivery"):

1. ``read`` / ``reclaim``: XREADGROUP (own blocking connection) / XAUTOCLAIM.
2. ``handoff``: one script per entry appends it to its thread's mailbox
   (idempotent on event id) and tries the thread lock, then its thread is
   ZADDed to the active index, in one round trip; the XACK follows (at the head
   of the next read).  The entry is durable in the mailbox before
   it leaves the stream.
3. ``begin``: mailbox + session + sent records (and whether the conversation
   moved to another thread: see agent_core.agent.move), one script that also
   records which owner began the head's turn (see scripts._mark_start).
4. ``record_sent``: a reply part, right after it reached the platform.
5. ``complete``: save session (version-checked), drop consumed entries, release
   the lock if the mailbox is empty (one script).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from agent_core.events import InboundEvent, MessageRef, ThreadKey
from agent_core.store import keys, scripts
from agent_core.store.scripting import Call, run_pipelined, run_pipelined_then, run_script
from agent_core.store.wire import Command, call, pairs, raise_first, roundtrip

_T = TypeVar("_T")


@dataclass
class TurnState:
    """What a lock holder reads at the start of a turn."""

    mailbox: list[InboundEvent]
    session_version: int
    session_data: bytes | None
    sent: dict[str, MessageRef] = field(default_factory=dict)
    # parts claimed, never recorded -> their claim marker ('pending:<ms>-<suffix>')
    pending: dict[str, str] = field(default_factory=dict)
    # start records ('<event id>#s:0' -> the owner that began a turn on that event,
    # '' for one that names none), as they were before this begin recorded its own
    starts: dict[str, str] = field(default_factory=dict)
    # event id -> when (ms) a turn on it was handed back for a platform's wait
    # ('<event id>#hb', written by RELEASE with a hold, dropped by COMPLETE)
    handed_back: dict[str, int] = field(default_factory=dict)
    # the hand-off found the lock already this owner's (not newly taken)
    lock_was_ours: bool = False
    # set by recovery: this execution reruns one that died (it runs its message alone)
    rerun: bool = False
    next_seq: int = 0  # arrival number of the thread's next event to run (0: unknown)
    moved_to: ThreadKey | None = None  # the conversation moved there: forward, never run


def _ms() -> int:
    return int(time.time() * 1000)


def claim_time(marker: str) -> int:
    """The time in a 'pending:<ms>[-<suffix>]' claim marker (ms since the epoch, the
    claiming worker's clock; 0 for anything else)."""
    if not marker.startswith("pending:"):
        return 0
    head = marker[8:].split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def claim_stamp() -> str:
    """What one send's part claims carry: the time, and a random suffix so that no
    other send's claim can ever carry the same."""
    return f"{_ms()}-{secrets.token_hex(4)}"


class Delivery:
    def __init__(
        self,
        redis: Redis,
        blocking: Redis,
        *,
        lock_ttl_ms: int = 30_000,
        seen_ttl_ms: int = 86_400_000,
        session_ttl_ms: int = 30 * 86_400_000,
    ) -> None:
        self.redis = redis
        self.blocking = blocking
        self.lock_ttl_ms = lock_ttl_ms
        self.seen_ttl_ms = seen_ttl_ms
        self.session_ttl_ms = session_ttl_ms
        # ``next`` outlives the arrival counter (see keys.SEQ_TTL_SECS)
        self.next_ttl_ms = max(session_ttl_ms, keys.SEQ_TTL_SECS * 1000)
        self._handoff = redis.register_script(scripts.HANDOFF)
        self._complete = redis.register_script(scripts.COMPLETE)
        self._trim = redis.register_script(scripts.TRIM_ACKED)
        self._drop_consumers = redis.register_script(scripts.DROP_CONSUMERS)
        self._renew = redis.register_script(scripts.RENEW)
        self._release = redis.register_script(scripts.RELEASE)
        self._begin = redis.register_script(scripts.BEGIN)
        self._save = redis.register_script(scripts.SAVE_SESSION)
        self._claim = redis.register_script(scripts.CLAIM_PART)
        self._unclaim = redis.register_script(scripts.UNCLAIM_PART)
        self._holds = redis.register_script(scripts.HOLDS)
        self._skip_gap = redis.register_script(scripts.SKIP_GAP)
        # threads whose completion emptied the mailbox: they leave the active index in
        # the next round trip this process sends anyway (``leave_index_later``)
        self._emptied: dict[ThreadKey, None] = {}
        # threads with events waiting whose ZADD back into the index failed: it is
        # sent again (ZADD NX) with the next round trip that carries removals
        self._reindex: dict[ThreadKey, None] = {}

    # -- stream ------------------------------------------------------------
    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(
                keys.INBOX_STREAM, keys.INBOX_GROUP, id="0", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read(
        self,
        consumer: str,
        *,
        count: int = 100,
        block_ms: int = 2000,
        ack_first: Sequence[tuple[bytes, InboundEvent | None]] = (),
    ) -> list[tuple[bytes, InboundEvent | None]]:
        """Read new entries; ``ack_first``: entries already handed off, acknowledged
        (XACK) at the head of the same round trip."""
        commands = [*_ack_commands(ack_first), _xreadgroup(consumer, count, ">", block_ms)]
        replies = await roundtrip(self.blocking, commands)
        raise_first(replies)
        return _entries(replies[-1])

    async def read_own_pending(
        self, consumer: str, *, count: int = 100
    ) -> list[tuple[bytes, InboundEvent | None]]:
        """Entries already delivered to ``consumer`` and not acknowledged (oldest first)."""
        resp = await call(self.redis, *_xreadgroup(consumer, count, "0"))
        return _entries(resp)

    async def reclaim(
        self, consumer: str, *, min_idle_ms: int, count: int = 100
    ) -> list[tuple[bytes, InboundEvent | None]]:
        resp = await self.redis.xautoclaim(
            keys.INBOX_STREAM, keys.INBOX_GROUP, consumer, min_idle_ms, "0-0", count=count
        )
        entries = resp[1] if resp else []
        return [(eid, _decode(f)) for eid, f in entries if f is not None]

    async def handoff(
        self,
        entries: list[tuple[bytes, InboundEvent | None]],
        owner: str,
        *,
        behind: int = 0,
    ) -> list[ThreadKey]:
        """Move entries into their mailboxes; return the threads whose lock is ours.
        ``behind`` > 0: each goes back in line right behind the mailbox's first
        ``behind`` entries (the turn running them), before the later arrivals waiting
        after them (see scripts.HANDOFF)."""
        return [t for t, _ in await self.handoff_and_begin(entries, owner, behind=behind)]

    async def handoff_and_begin(
        self,
        entries: list[tuple[bytes, InboundEvent | None]],
        owner: str,
        *,
        ack: bool = True,
        behind: int = 0,
    ) -> list[tuple[ThreadKey, TurnState]]:
        """Move entries into their mailboxes; return the threads whose lock is
        ours (taken now, or ours already: ``TurnState.lock_was_ours``, which the
        caller may be running), each with the state its turn begins from (read
        by the same script, so the first turn needs no ``begin`` round trip).
        ``behind``: as in ``handoff``.

        ``ack=False``: the caller acknowledges the entries later (``acknowledge``
        or ``read(ack_first=...)``).  Until then they stay pending in the stream:
        if this process dies first they are reclaimed and handed off again, which
        is idempotent and puts their threads back in the active index.
        """
        now = _ms()
        valid = [(eid, ev) for eid, ev in entries if ev is not None]
        acquired: dict[ThreadKey, TurnState | None] = {}
        if valid:
            calls = []
            for _eid, ev in valid:
                assert ev is not None
                t = ev.thread
                calls.append(
                    (
                        self._handoff,
                        [
                            keys.mailbox(t),
                            keys.seen(t),
                            keys.lock(t),
                            keys.next_seq(t),
                            keys.session(t),
                            keys.sent(t),
                            keys.moved(t),
                        ],
                        [
                            ev.event_id,
                            ev.to_json(),
                            now,
                            owner,
                            self.lock_ttl_ms,
                            self.seen_ttl_ms,
                            ev.seq,
                            behind,
                        ],
                    )
                )
            # The threads go into the active index (crash recovery) right after
            # their mailboxes, in the same round trip; the XACK comes later.
            threads = list(dict.fromkeys(ev.thread for _eid, ev in valid if ev is not None))
            index: list[Command] = [
                ("ZADD", keys.ACTIVE_THREADS, "NX", now, str(t)) for t in threads
            ]
            for t in threads:  # handed off now: not leaving the index after all
                self._emptied.pop(t, None)

            async def send(removals: list[Command]) -> tuple[tuple[Any, Any], list[Any]]:
                results, after = await run_pipelined_then(
                    self.redis, calls, then=[*index, *removals]
                )
                return (results, after[: len(index)]), after[len(index) :]

            results, indexed = await self._with_removals(send)
            raise_first(indexed)
            fresh: set[ThreadKey] = set()
            for (_eid, ev), res in zip(valid, results, strict=True):
                assert ev is not None
                if int(res[1]) == 1:
                    fresh.add(ev.thread)
                # a full answer (len > 3): the lock is ours, newly or already (a hand-off
                # of ours whose threads were lost before they started: a failed XACK)
                if len(res) > 3 and ev.thread not in acquired:
                    acquired[ev.thread] = None
                if ev.thread in acquired and len(res) > 3:
                    # the latest read of a thread we hold (later events of the batch included)
                    st = _scripted_state(res[3:9])
                    earlier = acquired[ev.thread]
                    if earlier is not None:
                        # the start records as the batch's first read found them: a later
                        # read shows the one that first read wrote over a dead owner's
                        st.starts = earlier.starts
                    acquired[ev.thread] = st
        ready = [(t, st) for t, st in acquired.items() if st is not None]
        for t, st in ready:
            st.lock_was_ours = t not in fresh
        if entries and ack:
            await self.acknowledge(entries)
        return ready

    async def acknowledge(self, entries: Sequence[tuple[bytes, InboundEvent | None]]) -> None:
        """XACK entries after their hand-off (which indexed their threads)."""
        if commands := _ack_commands(entries):
            raise_first(await roundtrip(self.redis, commands))

    # -- turns -------------------------------------------------------------
    async def begin(self, thread: ThreadKey, owner: str) -> TurnState:
        """What the lock holder's next turn begins from; records that ``owner``
        starts it (see scripts._mark_start)."""
        reply = await run_script(
            self.redis,
            self._begin,
            [
                keys.mailbox(thread),
                keys.session(thread),
                keys.sent(thread),
                keys.next_seq(thread),
                keys.moved(thread),
            ],
            [owner],
        )
        return _scripted_state(reply)

    async def peek(self, thread: ThreadKey, start: int) -> list[InboundEvent]:
        """Mailbox entries from index ``start`` (arrivals during a turn)."""
        raw = await self.redis.lrange(keys.mailbox(thread), start, -1)
        return [InboundEvent.from_json(r) for r in raw]

    async def claim_part(
        self,
        thread: ThreadKey,
        owner: str,
        field_name: str,
        *,
        stamp: str | None = None,
        replace: str = "",
    ) -> tuple[int, MessageRef | None]:
        """Fenced claim of a reply part: (-1, None) lock lost, (0, None) claimed,
        (1, ref) already sent, (2, None) being sent by another execution.
        ``stamp``: what the claim's marker carries (``claim_call``); the same send
        claiming again passes the same, and finds its own claim claimed.
        ``replace``: as in ``claim_call``."""
        script_call, _marker = self.claim_call(
            thread, owner, field_name, stamp=stamp, replace=replace
        )
        return self.claim_result(await run_script(self.redis, *script_call))

    def claim_call(
        self,
        thread: ThreadKey,
        owner: str,
        field_name: str,
        *,
        stamp: str | None = None,
        replace: str = "",
    ) -> tuple[Call, str]:
        """``claim_part``'s script call (to send in another round trip), and the
        marker it writes in the sent records when it claims ('pending:<stamp>';
        by default the time and a random suffix: one send's own).  ``replace``: a
        dead execution's marker found there that this claim takes over (the part
        was looked up on the platform and is not there); any other is reported."""
        stamp = stamp or claim_stamp()
        args: list[Any] = [owner, field_name, stamp]
        if replace:
            args.append(replace)
        return (self._claim, [keys.lock(thread), keys.sent(thread)], args), f"pending:{stamp}"

    async def unclaim_part(self, thread: ThreadKey, field_name: str, marker: str) -> bool:
        """Take back a claim that is still exactly ``marker`` (the send did not
        happen, or not yet); False if something else is recorded there."""
        return bool(
            await run_script(self.redis, self._unclaim, [keys.sent(thread)], [field_name, marker])
        )

    @staticmethod
    def claim_result(res: Any) -> tuple[int, MessageRef | None]:
        """``claim_part``'s answer from the claim script's raw reply."""
        code = int(res[0])
        if code != 1:
            return code, None
        raw = res[1]
        if isinstance(raw, bytes) and raw.startswith(b"pending:"):
            return 2, None
        return 1, MessageRef.from_dict(orjson.loads(raw))

    async def sent_ref(self, thread: ThreadKey, field_name: str) -> MessageRef | str | None:
        raw = await self.redis.hget(keys.sent(thread), field_name)
        if raw is None:
            return None
        if isinstance(raw, bytes) and raw.startswith(b"pending:"):
            return "pending"
        return MessageRef.from_dict(orjson.loads(raw))

    async def holds(self, thread: ThreadKey, owner: str) -> bool:
        return bool(await run_script(self.redis, self._holds, [keys.lock(thread)], [owner]))

    async def carry_sent(self, state: TurnState, target: ThreadKey) -> None:
        """Copy the reply parts recorded for ``state``'s mailbox events to ``target``,
        where those events are forwarded (same event ids, so the same part names):
        an answer cut off by a crash converges there instead of starting again.
        Parts ``target`` knows already are left alone (a rerun copies nothing twice)."""
        ids = {ev.event_id for ev in state.mailbox}
        now = _ms()
        fields: list[tuple[str, bytes]] = [
            (f, orjson.dumps(ref.to_dict()))
            for f, ref in state.sent.items()
            if f.rpartition(":")[0] in ids
        ]
        fields += [  # claimed in the old place: its time says nothing about the new one
            (f, f"pending:moved-{now}".encode())
            for f in state.pending
            if f.rpartition(":")[0] in ids
        ]
        if fields:
            replies = await roundtrip(
                self.redis, [("HSETNX", keys.sent(target), f, v) for f, v in fields]
            )
            raise_first(replies)

    async def record_sent(self, thread: ThreadKey, field_name: str, ref: MessageRef) -> None:
        await call(self.redis, "HSET", keys.sent(thread), field_name, orjson.dumps(ref.to_dict()))

    async def complete(
        self,
        thread: ThreadKey,
        owner: str,
        *,
        consumed: Sequence[InboundEvent],
        session_json: bytes | None,
        version: int,
        sent_fields: list[str],
        with_calls: Sequence[Call] = (),
        next_seq: int = 0,
    ) -> int:
        """Complete the turn that ran ``consumed`` (mailbox events, removed by event
        id); ``with_calls`` (idempotent per-thread scripts such as
        the undo checkpoint) ride in the same round trip, and so do the index
        removals waiting for one (``leave_index_later``)."""
        done: Call = (
            self._complete,
            [
                keys.mailbox(thread),
                keys.session(thread),
                keys.lock(thread),
                keys.sent(thread),
                keys.next_seq(thread),
            ],
            [
                owner,
                orjson.dumps([ev.event_id for ev in consumed]),
                session_json if session_json is not None else b"",
                version,
                self.session_ttl_ms,
                self.lock_ttl_ms,
                next_seq,
                self.next_ttl_ms,
                *sent_fields,
            ],
        )
        self._emptied.pop(thread, None)  # it is completing again: its own result decides

        async def send(removals: list[Command]) -> tuple[list[Any], list[Any]]:
            return await run_pipelined_then(self.redis, [done, *with_calls], removals)

        res = await self._with_removals(send)
        return int(res[0])

    # -- leaving the active index --------------------------------------------
    def leave_index_later(self, thread: ThreadKey) -> None:
        """``thread``'s completion emptied its mailbox (``complete`` returned 0): it
        leaves the active index inside the next ``complete`` or hand-off round trip
        this process sends (or ``flush_index``), rather than in one of its own.  Until
        then it stays indexed, which costs nothing: the sweeper finds its mailbox
        empty.  Only after a completion that returned 0 (the lock is gone with it):
        a thread with events waiting is never taken out of the index."""
        self._emptied[thread] = None

    def leaving_index(self, thread: ThreadKey) -> bool:
        """Is ``thread`` waiting to leave the index (emptied by this process)?"""
        return thread in self._emptied

    async def flush_index(self) -> None:
        """The waiting index removals, in a round trip of their own (the sweeper's
        tick: a process with nothing else to send)."""
        if not self._emptied and not self._reindex:
            return

        async def send(removals: list[Command]) -> tuple[None, list[Any]]:
            return None, await roundtrip(self.redis, removals)

        await self._with_removals(send)

    async def _with_removals(
        self, send: Callable[[list[Command]], Awaitable[tuple[_T, Sequence[Any]]]]
    ) -> _T:
        """``send(removals)``: a round trip carrying the waiting index removals after
        its own commands, answering (its own result, the removals' replies).  When it
        fails they wait for the next one (they may have run: ZREM + LLEN again is
        harmless, and puts back a thread whose mailbox refilled); so that a thread
        whose ZREM ran is never left out of the index meanwhile (its reply lost, and
        its mailbox refilled), it is also put back first (ZADD NX) in that next one."""
        leaving = list(self._emptied)
        self._emptied.clear()
        readd = list(self._reindex)
        self._reindex.clear()
        removals: list[Command] = []
        if readd:  # first: a thread in both is put back, then removed if empty
            now = _ms()
            removals.append(
                ("ZADD", keys.ACTIVE_THREADS, "NX", *(x for t in readd for x in (now, str(t))))
            )
        # ZREM before LLEN, as in ``deactivate``
        removals += [
            c
            for t in leaving
            for c in (("ZREM", keys.ACTIVE_THREADS, str(t)), ("LLEN", keys.mailbox(t)))
        ]
        try:
            out, replies = await send(removals)
        except BaseException:
            self._emptied.update(dict.fromkeys(leaving))
            self._reindex.update(dict.fromkeys([*readd, *leaving]))
            raise
        if readd:
            if isinstance(replies[0], Exception):
                self._reindex.update(dict.fromkeys(readd))
            replies = replies[1:]
        await self._left_index(leaving, replies)
        return out

    async def _left_index(self, leaving: list[ThreadKey], replies: Sequence[Any]) -> None:
        """After the removals of ``leaving`` (their replies): back into the index
        whichever mailbox refilled meanwhile (a hand-off between the completion and
        the ZREM); a removal the server refused is tried again later."""
        back: list[ThreadKey] = []
        for i, t in enumerate(leaving):
            zrem, llen = replies[2 * i], replies[2 * i + 1]
            if isinstance(zrem, Exception) or isinstance(llen, Exception):
                self._emptied[t] = None
            elif llen:
                back.append(t)
        await self._put_back(back)

    async def _put_back(self, threads: list[ThreadKey]) -> None:
        """ZADD NX ``threads`` (mail waits in them) back into the active index.  If
        that fails they are not lost from it: the ZADD rides again in the next round
        trip that carries index removals (``flush_index``, the sweeper's tick, sends
        it on its own), until it goes through."""
        if not threads:
            return
        try:
            await self.redis.zadd(
                keys.ACTIVE_THREADS, dict.fromkeys(map(str, threads), _ms()), nx=True
            )
        except BaseException:
            self._reindex.update(dict.fromkeys(threads))
            raise

    async def save_session(self, thread: ThreadKey, data: bytes, version: int) -> int:
        return int(
            await self._save(keys=[keys.session(thread)], args=[data, version, self.session_ttl_ms])
        )

    async def load_session(self, thread: ThreadKey) -> tuple[int, bytes | None]:
        ver, data = await self.redis.hmget(keys.session(thread), "v", "d")
        return int(ver or 0), cast(bytes | None, data)

    # -- locks -------------------------------------------------------------
    async def skip_gap(self, thread: ThreadKey, head: InboundEvent, owner: str) -> bool:
        """Give up waiting for earlier arrivals: ``head`` (the mailbox head the
        caller read) runs next (they will be appended after it when they turn up).
        False if it is not the head any more: a late arrival went before it in the
        meantime, nothing was set, and the caller begins again (see scripts.SKIP_GAP)."""
        return bool(
            await run_script(
                self.redis,
                self._skip_gap,
                [keys.mailbox(thread), keys.next_seq(thread), keys.sent(thread)],
                [head.event_id, head.seq, self.next_ttl_ms, owner],
            )
        )

    async def try_lock(self, thread: ThreadKey, owner: str) -> bool:
        return bool(await self.redis.set(keys.lock(thread), owner, nx=True, px=self.lock_ttl_ms))

    async def renew(self, held: list[ThreadKey], owner: str) -> list[bool]:
        if not held:
            return []
        res = await run_pipelined(
            self.redis, [(self._renew, [keys.lock(t)], [owner, self.lock_ttl_ms]) for t in held]
        )
        return [bool(r) for r in res]

    async def release(self, thread: ThreadKey, owner: str, hold_secs: float = 0.0) -> None:
        """Let the thread go.  A start record ``owner`` left on the mailbox head goes
        too (it did not finish that event: a shutdown, waiting for an earlier
        arrival), so the next execution is not taken for the rerun of a dead one.
        ``hold_secs`` > 0: handed back later, not now (a platform asked to wait that
        long): the lock becomes a hold no one owns, which expires then (the
        sweeper runs the thread after it; new events queue meanwhile)."""
        args: list[str | int] = [owner]
        if hold_secs > 0:  # (and when: the head's hand-back record, TurnState.handed_back)
            args += [max(int(hold_secs * 1000), 1), _ms()]
        await run_script(
            self.redis,
            self._release,
            [keys.lock(thread), keys.sent(thread), keys.mailbox(thread)],
            args,
        )

    # -- recovery index ----------------------------------------------------
    async def trim_acked(self) -> int:
        """Delete the inbox entries every worker is done with (never one unread or
        unacknowledged); how many went."""
        return int(
            await run_script(self.redis, self._trim, [keys.INBOX_STREAM], [keys.INBOX_GROUP])
        )

    async def drop_consumers(self, own: str = "", *, idle_ms: int = 600_000) -> int:
        """Remove from the inbox group the consumers with nothing pending that are
        ``own`` (a clean stop) or idle for ``idle_ms`` (stopped or dead processes:
        each process reads under a name of its own); how many went."""
        return int(
            await run_script(
                self.redis,
                self._drop_consumers,
                [keys.INBOX_STREAM],
                [keys.INBOX_GROUP, own, idle_ms],
            )
        )

    async def records_of(self, thread: ThreadKey, event_id: str) -> list[str]:
        """The fields of ``thread``'s sent hash that belong to ``event_id`` (its reply
        parts ``<id>:<n>``, notices and start record ``<id>#...``)."""
        raw = cast(list[bytes], await self.redis.hkeys(keys.sent(thread)))
        fields = (f.decode() for f in raw)
        return [
            f
            for f in fields
            if f.startswith(event_id) and f[len(event_id) : len(event_id) + 1] in (":", "#")
        ]

    async def active_threads(self, start: int = 0, limit: int = 200) -> list[ThreadKey]:
        """Threads of the active index, oldest first, from position ``start``."""
        raw = cast(
            list[bytes], await self.redis.zrange(keys.ACTIVE_THREADS, start, start + limit - 1)
        )
        out = []
        for r in raw:
            try:
                out.append(ThreadKey.parse(r.decode()))
            except ValueError:
                await self.redis.zrem(keys.ACTIVE_THREADS, r)
        return out

    async def unlocked_active(
        self, skip: Callable[[ThreadKey], bool], *, page: int = 500, most: int = 50_000
    ) -> list[ThreadKey]:
        """Threads of the active index whose lock nobody holds (their worker died),
        reading the whole index a page at a time (up to ``most``): one round trip of
        EXISTS per page, so a busy index of live workers' threads costs no writes.
        ``skip``: threads not to look at (running here)."""
        out: list[ThreadKey] = []
        for start in range(0, most, page):
            threads = await self.active_threads(start, page)
            look = [t for t in threads if not skip(t)]
            if look:
                held = await roundtrip(self.redis, [("EXISTS", keys.lock(t)) for t in look])
                raise_first(held)
                out += [t for t, h in zip(look, held, strict=True) if not h]
            if len(threads) < page:
                break
        return out

    async def deactivate(self, thread: ThreadKey) -> None:
        """Drop ``thread`` from the active index unless its mailbox refilled.

        ZREM before LLEN: a hand-off RPUSHes before it ZADDs, so any push this
        LLEN misses has its ZADD after our ZREM.
        """
        try:
            replies = await roundtrip(
                self.redis,
                [("ZREM", keys.ACTIVE_THREADS, str(thread)), ("LLEN", keys.mailbox(thread))],
            )
            raise_first(replies)
        except BaseException:
            # the ZREM may have run and the mailbox refilled: put it back, and remove
            # it again if empty, with the next round trip that carries removals
            self._reindex[thread] = None
            self._emptied[thread] = None
            raise
        if replies[1]:
            await self._put_back([thread])

    async def pending_count(self) -> int:
        info = await self.redis.xpending(keys.INBOX_STREAM, keys.INBOX_GROUP)
        return int(info["pending"]) if info else 0


def _entries(resp: Any) -> list[tuple[bytes, InboundEvent | None]]:
    """(entry id, event or None when malformed) from an XREADGROUP reply."""
    return [
        (entry_id, _decode(fields))
        for _stream, entries in (resp.items() if isinstance(resp, dict) else resp or ())
        for entry_id, fields in entries or ()
    ]


def _xreadgroup(consumer: str, count: int, start: str, block_ms: int | None = None) -> Command:
    """XREADGROUP on the inbox for ``consumer``: ``>`` new entries, ``0`` its own pending."""
    block = ("BLOCK", block_ms) if block_ms is not None else ()
    return (
        "XREADGROUP", "GROUP", keys.INBOX_GROUP, consumer, "COUNT", count, *block,
        "STREAMS", keys.INBOX_STREAM, start,
    )  # fmt: skip


def _ack_commands(entries: Sequence[tuple[bytes, InboundEvent | None]]) -> list[Command]:
    """XACK handed-off entries (their threads are in the active index already);
    an entry with no stream id (an event queued again from a mailbox or a session's
    held list, never read from the stream) has nothing to acknowledge."""
    ids = [eid for eid, _ in entries if eid]
    if not ids:
        return []
    return [("XACK", keys.INBOX_STREAM, keys.INBOX_GROUP, *ids)]


def _state(
    raw_box: list[bytes],
    ver: bytes | None,
    data: bytes | None,
    raw_sent: dict[bytes, bytes],
    raw_next: bytes | None,
    raw_moved: bytes | None = None,
) -> TurnState:
    mailbox = [InboundEvent.from_json(r) for r in raw_box]
    sent: dict[str, MessageRef] = {}
    pending: dict[str, str] = {}
    starts: dict[str, str] = {}
    handed_back: dict[str, int] = {}
    for k, v in raw_sent.items():
        name = k.decode()
        if v.startswith(b"pending:"):
            pending[name] = v.decode()
            continue
        ref = MessageRef.from_dict(orjson.loads(v))
        if name.endswith(START_SUFFIX):
            starts[name] = ref.message_id.removeprefix("started:")
        elif name.endswith(HANDBACK_SUFFIX):
            at = ref.message_id.removeprefix("handback:")
            if at.isdigit():
                handed_back[name.removesuffix(HANDBACK_SUFFIX)] = int(at)
        else:
            sent[name] = ref
    moved = ThreadKey.parse(raw_moved.decode()) if raw_moved else None
    return TurnState(
        mailbox,
        int(ver or 0),
        data,
        sent,
        pending,
        starts=starts,
        handed_back=handed_back,
        next_seq=int(raw_next or 0),
        moved_to=moved,
    )


START_SUFFIX = "#s:0"
HANDBACK_SUFFIX = "#hb"  # '<event id>#hb': when a turn on it was handed back


def _scripted_state(reply: Sequence[Any]) -> TurnState:
    """A turn's state as HANDOFF and BEGIN return it: mailbox, session version, session
    data, sent records (flat), next arrival, where the conversation moved ('' = none)."""
    box, ver, data, sent, nxt, moved = reply
    flat = dict(zip(sent[::2], sent[1::2], strict=True))
    return _state(box, ver or None, data or None, flat, nxt or None, moved or None)


def start_field(event_id: str) -> str:
    """The sent-records field naming who began a turn on ``event_id``."""
    return f"{event_id}{START_SUFFIX}"


def _decode(raw: Sequence[bytes] | dict[bytes, bytes] | None) -> InboundEvent | None:
    fields = raw if isinstance(raw, dict) else pairs(raw)
    if not fields or b"e" not in fields:
        return None
    try:
        ev = InboundEvent.from_json(fields[b"e"])
        if b"s" in fields:
            ev = dataclasses.replace(ev, seq=int(fields[b"s"]))
        return ev
    except (ValueError, KeyError, TypeError):
        return None
