"""Undo checkpoints: a snapshot of the history before every turn, in Redis.

Two lists per thread (``{thread}:undo`` / ``{thread}:redo``), newest first,
at most MAX_UNDO_CHECKPOINTS each, kept out of the session JSON so the session
stays small.  ``/undo`` moves one checkpoint from undo to redo (pushing the
current state), ``/redo`` the other way; a new turn clears redo.  Each step is
one script keyed by the event id, so a rerun of the same event is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis

from agent_core.agent.session import Session
from agent_core.events import ThreadKey
from agent_core.llm.base import ChatMessage
from agent_core.store import keys, scripts
from agent_core.store.scripting import Call


@dataclass
class Snapshot:
    history: list[ChatMessage]
    summary: str = ""

    @classmethod
    def of(cls, session: Session) -> Snapshot:
        return cls(list(session.history), session.summary)

    def to_json(self) -> bytes:
        return orjson.dumps({"h": [m.to_dict() for m in self.history], "sm": self.summary})

    @classmethod
    def from_json(cls, raw: bytes | str) -> Snapshot:
        d: dict[str, Any] = orjson.loads(raw)
        return cls([ChatMessage.from_dict(m) for m in d.get("h", ())], d.get("sm", ""))

    def apply(self, session: Session) -> None:
        session.history = list(self.history)
        session.summary = self.summary


class UndoStore:
    def __init__(self, redis: Redis, max_checkpoints: int, ttl_secs: int) -> None:
        self.redis = redis
        self.max = max_checkpoints
        self.ttl_ms = ttl_secs * 1000
        self._checkpoint = redis.register_script(scripts.UNDO_CHECKPOINT)
        self._move = redis.register_script(scripts.UNDO_MOVE)

    async def checkpoint(self, thread: ThreadKey, event_id: str, session: Session) -> None:
        await self._checkpoint(
            keys=[keys.undo(thread), keys.redo(thread), keys.undo_ops(thread)],
            args=[event_id, Snapshot.of(session).to_json(), self.max, self.ttl_ms],
        )

    def checkpoint_call(self, thread: ThreadKey, event_id: str, session: Session) -> Call:
        """The same checkpoint as a call for the worker's completion round trip.

        Written only if the turn completes (a crashed turn's rerun writes it),
        and idempotent on the event id like :meth:`checkpoint`.
        """
        return (
            self._checkpoint,
            [keys.undo(thread), keys.redo(thread), keys.undo_ops(thread)],
            [event_id, Snapshot.of(session).to_json(), self.max, self.ttl_ms],
        )

    async def _step(
        self, thread: ThreadKey, event_id: str, session: Session, src: str, dst: str
    ) -> bool:
        raw = await self._move(
            keys=[src, dst, keys.undo_ops(thread)],
            args=[event_id, Snapshot.of(session).to_json(), self.max, self.ttl_ms],
        )
        if not raw:
            return False
        Snapshot.from_json(raw).apply(session)
        return True

    async def undo(self, thread: ThreadKey, event_id: str, session: Session) -> bool:
        return await self._step(thread, event_id, session, keys.undo(thread), keys.redo(thread))

    async def redo(self, thread: ThreadKey, event_id: str, session: Session) -> bool:
        return await self._step(thread, event_id, session, keys.redo(thread), keys.undo(thread))

    async def depth(self, thread: ThreadKey) -> tuple[int, int]:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(keys.undo(thread))
            pipe.llen(keys.redo(thread))
            u, r = await pipe.execute()
        return int(u), int(r)

    async def clear(self, thread: ThreadKey) -> None:
        await self.redis.delete(keys.undo(thread), keys.redo(thread))
