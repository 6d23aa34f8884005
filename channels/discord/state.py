"""What the Discord gateway remembers in Redis (every key starts ``parley:discord:``).

* ``threads``  HASH thread id -> parent channel id: Discord threads the bot
  started or was mentioned in (follow-ups there need no mention), for
  ``THREAD_TTL_SECS`` after the last message Parley handled there.
* ``thread-seen`` ZSET thread id -> last activity (ms) of each ``threads`` entry:
  entries quiet for longer than ``THREAD_TTL_SECS`` are removed from both when
  the gateway starts and when it records a new thread.
* ``active``   ZSET channel id -> last activity (ms): channels / threads / DMs
  with an active conversation, re-read after a non-resumable reconnect.
* ``last``     HASH channel id -> id of the newest message seen there.
* ``meta``     HASH channel id -> "<guild id or ''>|<parent id or ''>", to rebuild
  the ThreadKey of messages fetched over REST (they carry no guild id).
  ``last`` and ``meta`` keep only the channels ``active`` holds: what falls out of
  its catch-up window leaves all three together.

Global keys only, never touched by a per-thread script (Redis Cluster safe).
"""

from __future__ import annotations

import time
from typing import cast

from redis.asyncio import Redis

PREFIX = "parley:discord:"
THREADS = PREFIX + "threads"
THREAD_SEEN = PREFIX + "thread-seen"
ACTIVE = PREFIX + "active"
LAST = PREFIX + "last"
META = PREFIX + "meta"

# How long a thread stays followed (no mention needed) after the last message
# Parley handled there: the default of Slack's SLACK_THREAD_TTL_SECS.
THREAD_TTL_SECS = 7 * 86_400


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def newer(a: str, b: str) -> bool:
    """Snowflake ``a`` is newer than ``b``."""
    return (len(a), a) > (len(b), b)


def _ms() -> int:
    return int(time.time() * 1000)


class DiscordState:
    def __init__(self, redis: Redis, thread_ttl_secs: float = THREAD_TTL_SECS) -> None:
        self._redis = redis
        self.thread_ttl_ms = int(thread_ttl_secs * 1000)
        self.threads: dict[str, str] = {}  # local copy of THREADS (followed threads)
        self._thread_seen: dict[str, int] = {}  # local copy of THREAD_SEEN

    async def load(self) -> None:
        """Read the followed threads, dropping (in Redis too) those quiet too long.
        A ``threads`` entry without a time (written before ``thread-seen`` existed)
        counts as active now."""
        now = _ms()
        cutoff = now - self.thread_ttl_ms
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(THREADS)
            pipe.zrange(THREAD_SEEN, 0, -1, withscores=True)
            raw, scored = await pipe.execute()
        threads = {_s(k): _s(v) for k, v in raw.items()}
        seen = {_s(m): int(s) for m, s in scored}
        stale = [t for t, at in seen.items() if at < cutoff or t not in threads]
        unscored = {t: now for t in threads if t not in seen}
        for t in stale:
            threads.pop(t, None)
            seen.pop(t, None)
        seen.update(unscored)
        if stale or unscored:
            async with self._redis.pipeline(transaction=False) as pipe:
                if stale:
                    pipe.hdel(THREADS, *stale)
                    pipe.zrem(THREAD_SEEN, *stale)
                if unscored:
                    pipe.zadd(THREAD_SEEN, cast(dict[str | bytes, float], unscored))
                await pipe.execute()
        self.threads = threads
        self._thread_seen = seen

    def thread_active(self, thread_id: str) -> bool:
        """Parley follows ``thread_id`` (it was active there within the window)."""
        at = self._thread_seen.get(thread_id)
        return thread_id in self.threads and at is not None and at >= _ms() - self.thread_ttl_ms

    async def add_thread(self, thread_id: str, parent_id: str) -> None:
        now = _ms()
        if self.threads.get(thread_id) == parent_id and self.thread_active(thread_id):
            # known: only its time moves on, with the message's own writes (seen)
            return
        self.threads[thread_id] = parent_id
        self._thread_seen[thread_id] = now
        # threads quiet too long go in the same round trip (this process holds the
        # gateway lease: its copy is what Redis holds since load)
        cutoff = now - self.thread_ttl_ms
        stale = [t for t, at in self._thread_seen.items() if at < cutoff]
        for t in stale:
            self.threads.pop(t, None)
            self._thread_seen.pop(t, None)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(THREADS, thread_id, parent_id)
            pipe.zadd(THREAD_SEEN, {thread_id: now})
            if stale:
                pipe.hdel(THREADS, *stale)
                pipe.zrem(THREAD_SEEN, *stale)
            await pipe.execute()

    async def seen(self, channel_id: str, message_id: str, guild_id: str, parent_id: str) -> None:
        """Record activity in ``channel_id`` up to ``message_id`` (never moves back);
        a followed thread's window starts again."""
        now = _ms()
        followed = self.thread_active(channel_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zadd(ACTIVE, {channel_id: now})
            pipe.hset(META, channel_id, f"{guild_id}|{parent_id}")
            pipe.hget(LAST, channel_id)
            if followed:
                pipe.zadd(THREAD_SEEN, {channel_id: now})
            res = await pipe.execute()
        if followed:
            self._thread_seen[channel_id] = now
        prev = res[2]
        if prev is None or newer(message_id, _s(prev)):
            await self._redis.hset(LAST, channel_id, message_id)

    async def rewind(self, marks: dict[str, tuple[str, str, str]]) -> None:
        """``marks``: channel id -> (mark, guild id, parent id).  Each channel becomes
        active now, with its last seen mark moved back to ``mark`` if it is past it
        (set if it has none): the next catch-up reads what came after ``mark`` again
        (what was published meanwhile is dropped by Ingest's dedup).  For messages
        received but not handled when the connection closed."""
        channels = list(marks)
        if not channels:
            return
        now = _ms()
        current = await self._redis.hmget(LAST, channels)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zadd(ACTIVE, dict.fromkeys(channels, now))
            for ch, prev in zip(channels, current, strict=True):
                mark, guild_id, parent_id = marks[ch]
                pipe.hset(META, ch, f"{guild_id}|{parent_id}")
                if prev is None or newer(_s(prev), mark):
                    pipe.hset(LAST, ch, mark)
            await pipe.execute()

    async def active_since(self, window_secs: float) -> list[tuple[str, str, str, str]]:
        """(channel id, last message id, guild id, parent id) of recent conversations.
        What is older goes, from ``active``, ``last`` and ``meta`` alike."""
        cutoff = _ms() - int(window_secs * 1000)
        # one reader: the gateway's queue loop, which also runs every seen()
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(ACTIVE, "-inf", cutoff)
            pipe.zrange(ACTIVE, 0, -1)
            pipe.hkeys(LAST)
            pipe.hkeys(META)
            _, members, last_keys, meta_keys = await pipe.execute()
        channels = [_s(cast(bytes, c)) for c in members]
        keep = set(channels)
        gone_last = [k for k in map(_s, last_keys) if k not in keep]
        gone_meta = [k for k in map(_s, meta_keys) if k not in keep]
        if not channels and not gone_last and not gone_meta:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            if gone_last:
                pipe.hdel(LAST, *gone_last)
            if gone_meta:
                pipe.hdel(META, *gone_meta)
            if channels:
                pipe.hmget(LAST, channels)
                pipe.hmget(META, channels)
            res = await pipe.execute()
        if not channels:
            return []
        last, meta = res[-2], res[-1]
        out = []
        for ch, last_id, m in zip(channels, last, meta, strict=True):
            if last_id is None:
                continue
            guild, _, parent = _s(m or b"|").partition("|")
            out.append((ch, _s(last_id), guild, parent))
        return out
