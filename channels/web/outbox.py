"""Outbound for the local channels (web chat, console): a Redis Stream per thread,
and for the web chat a transcript of the messages themselves.

Any worker process can answer a browser or a terminal that is connected to a
different process: the worker appends what it says to the thread's ``out``
stream and the web process (SSE) or the console reads it.

The ``out`` stream is the *live feed*: every message, streamed edit, typing
ping and end-of-turn marker.  Each edit carries the message's whole text, so a
web edit deletes the edit it replaces (the message's latest version is all a
resuming page needs): a long streamed answer is its message entry and one edit,
not a few hundred copies of a growing text.  It is short-lived: capped at :data:`LIVE_MAXLEN` entries and
deleted :data:`LIVE_TTL_SECS` after its last entry.

The web chat's history comes from the *transcript* instead: one entry per
message (the user's and the agent's, the latest version of each, in the order
they first appeared), capped at :data:`TRANSCRIPT_MAX_MESSAGES` messages (the
oldest go first) and deleted :data:`TRANSCRIPT_TTL_SECS` after its last message
or history read.  Typing pings and end-of-turn markers never go there, and an
edit replaces its message in place, so a long conversation keeps its start.
One Lua script writes both, so a history read (transcript + last stream id, in
one transaction) and the live feed after that id never miss or repeat a step.

Entry fields of the stream: ``t`` = user | message | edit | typing | done |
retract, ``id`` = message id, ``m`` = OutboundMessage JSON (or the user's text),
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
from channels.web.session import COOKIE_MAX_AGE

LIVE_MAXLEN = 2000  # entries of the live ``out`` stream (approximate trim)
LIVE_TTL_SECS = 86_400  # the live stream is deleted a day after its last entry
TRANSCRIPT_MAX_MESSAGES = 1000  # messages kept per web chat conversation
# The transcript is deleted this long after its last message or history read: as long
# as the cookie that names the conversation can be (it is refused 30 days after signing).
TRANSCRIPT_TTL_SECS = COOKIE_MAX_AGE
MARK = b"~v"  # transcript hash field: the transcript exists (no legacy import needed)

# KEYS: out stream, transcript order (LIST of ids), transcript messages (HASH id ->
# "kind|entry id|m JSON").  ARGV: t, id, m ('' for none), ev ('' for none), stream
# maxlen, stream ttl, transcript cap (0: no transcript), transcript ttl, in (a
# "done" marker's JSON list of the message ids its turn took in; '' for none).  Returns {entry id, created,
# existed}: created = 1 when this call started the thread's transcript, existed = 1
# when the transcript already held this id (a message sent again).
_ADD = """
local t, id, m, ev = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local fields = {'t', t, 'id', id}
if m ~= '' then fields[#fields + 1] = 'm'; fields[#fields + 1] = m end
if ev ~= '' then fields[#fields + 1] = 'ev'; fields[#fields + 1] = ev end
if ARGV[9] and ARGV[9] ~= '' then fields[#fields + 1] = 'in'; fields[#fields + 1] = ARGV[9] end
local entry = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], '*', unpack(fields))
redis.call('EXPIRE', KEYS[1], ARGV[6])
local cap = tonumber(ARGV[7])
local created, existed = 0, 0
if cap > 0 and id ~= '' then
  if t == 'user' or t == 'message' then
    created = redis.call('HSETNX', KEYS[3], '~v', '1')
    existed = redis.call('HEXISTS', KEYS[3], id)
    if existed == 0 then redis.call('RPUSH', KEYS[2], id) end
    redis.call('HSET', KEYS[3], id, t .. '|' .. entry .. '|' .. m)
    local n = redis.call('LLEN', KEYS[2])
    if n > cap then
      local gone = redis.call('LRANGE', KEYS[2], 0, n - cap - 1)
      redis.call('LTRIM', KEYS[2], n - cap, -1)
      redis.call('HDEL', KEYS[3], unpack(gone))
    end
  elseif t == 'edit' then
    local old = redis.call('HGET', KEYS[3], id)
    if old then
      local kind, prev = string.match(old, '^([^|]*)|([^|]*)')
      redis.call('HSET', KEYS[3], id, kind .. '|' .. entry .. '|' .. m)
      -- Every edit carries the whole text: the edit this one replaces goes from the live
      -- stream (a page resuming after it gets this one), unless it is the stream's first
      -- entry, which the SSE gap check compares with.  The message entry itself stays.
      local e = (prev and prev ~= '') and redis.call('XRANGE', KEYS[1], prev, prev) or {}
      if e[1] and e[1][2][1] == 't' and e[1][2][2] == 'edit' then
        local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
        if first[1][1] ~= prev then redis.call('XDEL', KEYS[1], prev) end
      end
    end
  elseif t == 'retract' then
    if redis.call('HDEL', KEYS[3], id) == 1 then redis.call('LREM', KEYS[2], 1, id) end
  end
  redis.call('EXPIRE', KEYS[2], ARGV[8])
  redis.call('EXPIRE', KEYS[3], ARGV[8])
end
return {entry, created, existed}
"""

# Older messages (from a transcript kept only in the stream), newest first: prepended
# unless already there, while the cap allows.  KEYS: order, messages; ARGV: cap, then
# id, value pairs.
_IMPORT = """
local cap = tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  if redis.call('LLEN', KEYS[1]) >= cap then break end
  if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('LPUSH', KEYS[1], ARGV[i])
  end
end
return 0
"""


def transcript_keys(thread: ThreadKey) -> tuple[str, str]:
    """(order LIST, messages HASH) of the thread's transcript (same hash tag as ``out``)."""
    return f"{keys.PREFIX}{thread.tag}:log", f"{keys.PREFIX}{thread.tag}:msgs"


def part_message_id(thread: ThreadKey, part: str) -> str:
    """A stable id for a reply part: resending the part updates the same entry."""
    return "p" + hashlib.sha256(f"{thread}|{part}".encode()).hexdigest()[:20]


def new_message_id() -> str:
    return f"{int(time.time() * 1000):x}{secrets.token_hex(4)}"


class LocalOutbox:
    """Outbox for ``web`` and ``console``: the thread's out stream (+ the web transcript)."""

    wire_hook = True
    idempotent_parts = True  # a part sent twice is one transcript entry (same id)

    def __init__(self, redis: Redis, channel: str, *, stream_interval: float | None = 0.2) -> None:
        self.redis = redis
        self.channel = channel
        self.stream_interval = stream_interval
        self.cap = TRANSCRIPT_MAX_MESSAGES if channel == "web" else 0
        self._script = redis.register_script(_ADD)
        self._import = redis.register_script(_IMPORT)

    async def _add(self, thread: ThreadKey, fields: dict[str, Any]) -> bool:
        """Write one entry; whether the transcript already held this message id."""
        m = fields.get("m", b"")
        order, msgs = transcript_keys(thread)
        stream = keys.outbox_stream(thread)
        entry, created, existed = await self._script(
            keys=[stream, order, msgs],
            args=[
                fields["t"],
                fields.get("id", ""),
                m if isinstance(m, bytes | str) else orjson.dumps(m),
                fields.get("ev", ""),
                LIVE_MAXLEN,
                LIVE_TTL_SECS,
                self.cap,
                TRANSCRIPT_TTL_SECS,
                orjson.dumps(fields["in"]) if fields.get("in") else "",
            ],
        )
        if created:
            await self._import_stream(thread, entry)
        return bool(existed)

    async def _import_stream(self, thread: ThreadKey, first: bytes) -> None:
        """Copy a conversation written before transcripts existed (only in the stream)."""
        stream = keys.outbox_stream(thread)
        first_id = first.decode() if isinstance(first, bytes) else str(first)
        entries = await self.redis.xrange(stream, min="-", max="(" + first_id)
        items = fold_transcript(entries)
        if not items:
            return
        args: list[Any] = [self.cap]
        for item in reversed(items):
            m = {k: v for k, v in item.items() if k not in ("kind", "id", "entry")}
            args += [item["id"], f"{item['kind']}|{item['entry']}|".encode() + orjson.dumps(m)]
        await self._import(keys=list(transcript_keys(thread)), args=args)

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
        await self.turn_finished_with(thread, event, [event.event_id] if event else [])

    async def turn_finished_with(
        self, thread: ThreadKey, event: InboundEvent | None, taken_in: list[str]
    ) -> None:
        """The end-of-turn marker: ``ev`` the turn's first message, ``in`` every
        message it took in (a line folded into a running turn is answered there:
        the console that sent it waits for this marker, not one of its own)."""
        await self._add(
            thread,
            {"t": "done", "id": "", "ev": event.event_id if event else "", "in": taken_in},
        )

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        if not text:
            return
        msg = OutboundMessage(text, notice=True, private_to=event.user_id)
        await self._add(event.thread, {"t": "message", "id": new_message_id(), "m": msg.to_dict()})

    async def record_user(self, thread: ThreadKey, event: InboundEvent) -> bool:
        """Put the user's own message in the transcript (shown on refresh).

        Returns whether it was there already (the same message sent again).
        """
        return await self._add(
            thread,
            {"t": "user", "id": event.event_id, "m": {"tx": event.text, "u": event.user_name}},
        )

    async def retract_user(self, thread: ThreadKey, event_id: str) -> None:
        """Take back a recorded user message the store then refused."""
        await self._add(thread, {"t": "retract", "id": event_id})


async def read_transcript(redis: Redis, thread: ThreadKey) -> tuple[list[dict[str, Any]], str]:
    """The conversation so far (oldest first) and the live stream's last entry id.

    Read in one transaction with the stream's last id, so following the stream
    after that id shows exactly what came later.  A conversation from before
    transcripts existed is folded from its stream.
    """
    order_key, msgs_key = transcript_keys(thread)
    stream = keys.outbox_stream(thread)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.lrange(order_key, 0, -1)
        pipe.hgetall(msgs_key)
        pipe.xrevrange(stream, count=1)
        pipe.expire(order_key, TRANSCRIPT_TTL_SECS)  # a conversation still read stays
        pipe.expire(msgs_key, TRANSCRIPT_TTL_SECS)
        ids, stored, last, _, _ = await pipe.execute()
    if MARK not in stored:
        entries = await redis.xrange(stream)
        return fold_transcript(entries), entries[-1][0].decode() if entries else "0-0"
    out: list[dict[str, Any]] = []
    for mid in ids:
        raw = stored.get(mid)
        if raw is None:
            continue
        kind, entry, m = raw.split(b"|", 2)
        out.append({"kind": kind.decode(), "id": mid.decode(), "entry": entry.decode()})
        out[-1].update(orjson.loads(m or b"{}"))
    return out, last[0][0].decode() if last else "0-0"


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
