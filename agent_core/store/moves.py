"""Moving a conversation's state to another thread: the Redis side.

A platform can give a conversation a new id (a Telegram basic group upgraded to
a supergroup).  :mod:`agent_core.agent.move` decides what the conversation looks
like in its new thread; this module reads the old one and holds the atomic
steps that move it.

The mover holds both threads' locks (the new thread's as the turn running the
MOVED event, the old thread's taken with :meth:`Delivery.try_lock`), so no turn
of either runs meanwhile.  The two threads live on different Redis Cluster
slots, so no one script may touch both: the move is three scripts, each atomic
on one thread's keys, in an order that a crash anywhere leaves for the rerun of
the MOVED event to finish, and that never applies anything twice:

1. :meth:`Moves.fence` (old thread): ``moved`` is set (from now on the old
   thread's events are forwarded to the new thread and never run where they
   are, even once the mover's lock on it expired) and ``redirect`` (the channel
   sends to the new conversation id) - only while the old lock is the mover's;
2. :meth:`Moves.move_in` (new thread): the session and the keys that follow a
   conversation are written and the old thread recorded in ``moved_in`` -
   unless it is recorded there already (then nothing changes).  What it copies
   cannot have changed since step 1;
3. :meth:`Moves.move_out` (old thread): its state is deleted and its lock
   released - only while that lock is still the mover's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from agent_core.events import ThreadKey
from agent_core.store import keys, scripts
from agent_core.store.scripting import run_script
from agent_core.store.wire import raise_first, roundtrip

# The keys that belong to a conversation besides its session and approvals:
# (key, type, what happens to it when the new thread holds a conversation too).
# Undo checkpoints are snapshots of one thread's history alone: /undo in a
# merged conversation would drop the other part, so when both threads had a
# history, both threads' are cleared (``undo`` of :meth:`Moves.move_in`).  The
# archive of compacted history (and the demo tool's notes) go before the new
# thread's own.
FOLLOWING: tuple[tuple[Callable[[ThreadKey], str], str, str], ...] = (
    (keys.undo, "list", "clear"),
    (keys.redo, "list", "clear"),
    (keys.undo_ops, "hash", "clear"),
    (keys.archive, "list", "prepend"),
    (keys.demo_notes, "list", "prepend"),
)


@dataclass
class Copied:
    """One key's content and its time to live (ms, 0: none)."""

    kind: str  # list | hash
    values: list[bytes]
    ttl_ms: int


@dataclass
class OldThread:
    """What a move reads from the thread it moves away from."""

    session_version: int
    session_data: bytes | None
    following: list[Copied | None] = field(default_factory=list)  # as FOLLOWING, None: absent


def _flat(raw: Any) -> list[bytes]:
    """HGETALL's reply (a dict under RESP3, a flat list under RESP2) as field, value, ..."""
    if isinstance(raw, dict):
        return [x for kv in raw.items() for x in kv]
    return list(raw or ())


class Moves:
    def __init__(self, redis: Redis, *, session_ttl_ms: int) -> None:
        self.redis = redis
        self.session_ttl_ms = session_ttl_ms
        self._fence = redis.register_script(scripts.MOVE_FENCE)
        self._in = redis.register_script(scripts.MOVE_IN)
        self._out = redis.register_script(scripts.MOVE_OUT)

    async def read(self, old: ThreadKey) -> OldThread:
        """The old thread's session and its following keys."""
        commands: list[Sequence[Any]] = [("HMGET", keys.session(old), "v", "d")]
        for key_of, kind, _ in FOLLOWING:
            key = key_of(old)
            commands.append(("LRANGE", key, 0, -1) if kind == "list" else ("HGETALL", key))
            commands.append(("PTTL", key))
        replies = await roundtrip(self.redis, commands)
        raise_first(replies)
        ver, data = replies[0]
        following: list[Copied | None] = []
        for i, (_, kind, _) in enumerate(FOLLOWING):
            raw, ttl = replies[1 + 2 * i], replies[2 + 2 * i]
            values = list(raw or ()) if kind == "list" else _flat(raw)
            following.append(Copied(kind, values, max(int(ttl), 0)) if values else None)
        return OldThread(int(ver or 0), data, following)

    async def approvals(self, old: ThreadKey, ids: Sequence[str]) -> dict[str, Copied]:
        """The approval hashes ``ids`` of ``old`` (absent ones left out)."""
        if not ids:
            return {}
        commands: list[Sequence[Any]] = []
        for aid in ids:
            commands += [("HGETALL", keys.approval(old, aid)), ("PTTL", keys.approval(old, aid))]
        replies = await roundtrip(self.redis, commands)
        raise_first(replies)
        out = {}
        for i, aid in enumerate(ids):
            values = _flat(replies[2 * i])
            if values:
                out[aid] = Copied("hash", values, max(int(replies[2 * i + 1]), 0))
        return out

    async def move_in(
        self,
        new: ThreadKey,
        old: ThreadKey,
        *,
        session_json: bytes | None,
        expected_version: int,
        following: Sequence[Copied | None],
        merging: bool,
        approvals: dict[str, Copied],
        undo: str = "copy",
    ) -> int:
        """Write the conversation into ``new`` once: 1 written, 0 written before,
        -2 ``new``'s session is not at ``expected_version`` (nothing written).
        ``merging``: ``new`` holds a conversation (the archive goes before its own);
        ``undo``: its checkpoints are the old thread's ("copy"), stay ("keep") or
        are deleted ("clear": neither thread's fits the merged history)."""
        key_list = [keys.moved_in(new), keys.session(new)]
        args: list[Any] = [
            str(old),
            int(time.time() * 1000),
            keys.MOVED_TTL_SECS * 1000,
            session_json or b"",
            expected_version,
            self.session_ttl_ms,
        ]
        for (key_of, _, on_merge), copied in zip(FOLLOWING, following, strict=True):
            if on_merge == "clear" and undo != "copy":
                if undo == "clear":
                    key_list.append(key_of(new))
                    args += ["clear", 0, 0]
                continue
            if copied is None:
                continue
            mode = "prepend" if merging and on_merge == "prepend" else copied.kind
            key_list.append(key_of(new))
            args += [mode, copied.ttl_ms, len(copied.values), *copied.values]
        for aid, copied in approvals.items():
            key_list.append(keys.approval(new, aid))
            args += ["hash", copied.ttl_ms, len(copied.values), *copied.values]
        return int(await run_script(self.redis, self._in, key_list, args))

    async def fence(self, old: ThreadKey, new: ThreadKey, owner: str) -> int:
        """Mark ``old`` as moved to ``new`` while ``owner`` holds its lock: 1 done (or
        before), 0 the lock is not ``owner``'s, -1 ``old`` moved elsewhere before."""
        same_place = (old.channel, old.tenant) == (new.channel, new.tenant)
        res = await run_script(
            self.redis,
            self._fence,
            [keys.lock(old), keys.moved(old), keys.redirect(old)],
            [owner, str(new), new.conversation if same_place else "", keys.MOVED_TTL_SECS],
        )
        return int(res)

    async def move_out(self, old: ThreadKey, owner: str, approval_ids: Sequence[str]) -> bool:
        """Delete the conversation at ``old`` and release its lock - only while
        ``owner`` holds it (False: it does not, nothing changed)."""
        gone = [keys.session(old), keys.interrupt(old)]
        gone += [key_of(old) for key_of, _, _ in FOLLOWING]
        gone += [keys.approval(old, aid) for aid in approval_ids]
        return bool(await run_script(self.redis, self._out, [keys.lock(old), *gone], [owner]))
