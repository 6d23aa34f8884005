"""What the Discord gateway remembers in Redis (every key starts ``parley:discord:``).

* ``threads``  HASH thread id -> parent channel id: Discord threads the bot
  started or was mentioned in (follow-ups there need no mention).
* ``active``   ZSET channel id -> last activity (ms): channels / threads / DMs
  with an active conversation, re-read after a non-resumable reconnect.
* ``last``     HASH channel id -> id of the newest message seen there.
* ``meta``     HASH channel id -> "<guild id or ''>|<parent id or ''>", to rebuild
  the ThreadKey of messages fetched over REST (they carry no guild id).

Global keys only, never touched by a per-thread script (Redis Cluster safe).
"""

from __future__ import annotations

import time
from typing import cast

from redis.asyncio import Redis

PREFIX = "parley:discord:"
THREADS = PREFIX + "threads"
ACTIVE = PREFIX + "active"
LAST = PREFIX + "last"
META = PREFIX + "meta"


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def newer(a: str, b: str) -> bool:
    """Snowflake ``a`` is newer than ``b``."""
    return (len(a), a) > (len(b), b)


class DiscordState:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self.threads: dict[str, str] = {}  # local copy of THREADS

    async def load(self) -> None:
        raw = await self._redis.hgetall(THREADS)
        self.threads = {_s(k): _s(v) for k, v in raw.items()}

    def thread_active(self, thread_id: str) -> bool:
        return thread_id in self.threads

    async def add_thread(self, thread_id: str, parent_id: str) -> None:
        if self.threads.get(thread_id) == parent_id:
            return
        self.threads[thread_id] = parent_id
        await self._redis.hset(THREADS, thread_id, parent_id)

    async def seen(self, channel_id: str, message_id: str, guild_id: str, parent_id: str) -> None:
        """Record activity in ``channel_id`` up to ``message_id`` (never moves back)."""
        now = int(time.time() * 1000)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zadd(ACTIVE, {channel_id: now})
            pipe.hset(META, channel_id, f"{guild_id}|{parent_id}")
            pipe.hget(LAST, channel_id)
            res = await pipe.execute()
        prev = res[2]
        if prev is None or newer(message_id, _s(prev)):
            await self._redis.hset(LAST, channel_id, message_id)

    async def active_since(self, window_secs: float) -> list[tuple[str, str, str, str]]:
        """(channel id, last message id, guild id, parent id) of recent conversations."""
        cutoff = int((time.time() - window_secs) * 1000)
        await self._redis.zremrangebyscore(ACTIVE, "-inf", cutoff)
        members = await self._redis.zrange(ACTIVE, 0, -1)
        channels = [_s(cast(bytes, c)) for c in members]
        if not channels:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(LAST, channels)
            pipe.hmget(META, channels)
            last, meta = await pipe.execute()
        out = []
        for ch, last_id, m in zip(channels, last, meta, strict=True):
            if last_id is None:
                continue
            guild, _, parent = _s(m or b"|").partition("|")
            out.append((ch, _s(last_id), guild, parent))
        return out
