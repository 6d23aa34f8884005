"""Outbound for the local channels (web chat, console): a Redis Stream per thread.

Any worker process can answer a browser or a terminal that is connected to a
different process: the worker appends what it says to the thread's ``out``
stream and the web process (SSE) or the console reads it.  The stream is also
the visible transcript: a refreshed page replays it, edits applied.

Entry fields: ``t`` = user | message | edit | typing | done | retract | notice-private,
``id`` = message id, ``m`` = OutboundMessage JSON (or the user's text),
``ev`` = the inbound event id it answers (for ``done``).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

import orjson
from redis.asyncio import Redis

from agent_core.events import InboundEvent, MessageRef, OutboundMessage, ThreadKey
from agent_core.outbox import current_part, on_wire
from agent_core.store import keys

TRANSCRIPT_MAXLEN = 2000


def part_message_id(thread: ThreadKey, part: str) -> str:
    """A stable id for a reply part: resending the part updates the same entry."""
    return "p" + hashlib.sha256(f"{thread}|{part}".encode()).hexdigest()[:20]


def new_message_id() -> str:
    return f"{int(time.time() * 1000):x}{secrets.token_hex(4)}"


class LocalOutbox:
    """Outbox for ``web`` and ``console``: XADD to the thread's out stream."""

    wire_hook = True
    idempotent_parts = True  # a part sent twice is one transcript entry (same id)

    def __init__(self, redis: Redis, channel: str, *, stream_interval: float | None = 0.2) -> None:
        self.redis = redis
        self.channel = channel
        self.stream_interval = stream_interval

    async def _add(self, thread: ThreadKey, fields: dict[str, Any]) -> None:
        await self.redis.xadd(
            keys.outbox_stream(thread),
            {k: (v if isinstance(v, bytes | str) else orjson.dumps(v)) for k, v in fields.items()},
            maxlen=TRANSCRIPT_MAXLEN,
            approximate=True,
        )

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        part = current_part()
        mid = part_message_id(thread, part) if part else new_message_id()
        await on_wire()
        await self._add(thread, {"t": "message", "id": mid, "m": message.to_dict()})
        return MessageRef(self.channel, str(thread), mid)

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        thread = ThreadKey.parse(ref.conversation)
        await self._add(thread, {"t": "edit", "id": ref.message_id, "m": message.to_dict()})
        return ref

    async def typing(self, thread: ThreadKey) -> None:
        await self._add(thread, {"t": "typing", "id": ""})

    async def turn_finished(self, thread: ThreadKey, event: InboundEvent | None) -> None:
        await self._add(thread, {"t": "done", "id": "", "ev": event.event_id if event else ""})

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        if not text:
            return
        msg = OutboundMessage(text, notice=True, private_to=event.user_id)
        await self._add(event.thread, {"t": "message", "id": new_message_id(), "m": msg.to_dict()})

    async def record_user(self, thread: ThreadKey, event: InboundEvent) -> None:
        """Put the user's own message in the transcript (shown on refresh)."""
        await self._add(
            thread,
            {"t": "user", "id": event.event_id, "m": {"tx": event.text, "u": event.user_name}},
        )

    async def retract_user(self, thread: ThreadKey, event_id: str) -> None:
        """Take back a recorded user message the store then refused."""
        await self._add(thread, {"t": "retract", "id": event_id})


def kind_of(item: dict[str, Any]) -> str:
    return str(item.get("kind", "message"))


def fold_transcript(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[dict[str, Any]]:
    """Replay stream entries into the visible list of messages (edits applied)."""
    out: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for entry_id, f in entries:
        kind = f.get(b"t", b"").decode()
        mid = f.get(b"id", b"").decode()
        if kind in ("message", "user"):
            m = orjson.loads(f.get(b"m", b"{}"))
            item = {"kind": kind, "id": mid, "entry": entry_id.decode(), **m}
            if mid and mid in index:  # the same part sent again: one entry
                out[index[mid]] = item
                continue
            index[mid] = len(out)
            out.append(item)
        elif kind == "retract" and mid in index:
            out[index.pop(mid)] = {}  # dropped below
        elif kind == "edit" and mid in index:
            m = orjson.loads(f.get(b"m", b"{}"))
            out[index[mid]] = {
                "kind": kind_of(out[index[mid]]),
                "id": mid,
                "entry": entry_id.decode(),
                **m,
            }
    return [item for item in out if item]
