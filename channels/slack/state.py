"""The Slack channel's own Redis keys (prefix ``parley:slack:``).

* ``parley:slack:thread:<team>:<channel>:<thread_ts>`` -- Parley takes part in
  this thread: plain replies in it are follow-ups (no mention needed). TTL.
* ``parley:slack:last:<thread key>`` -- "<channel> <ts>" of the newest user
  message of a thread, so the worker can put the working reaction on it. TTL.
"""

from __future__ import annotations

from redis.asyncio import Redis

from agent_core.events import ThreadKey

PREFIX = "parley:slack:"
LAST_TTL_SECS = 3_600


def thread_key(team: str, channel: str, thread_ts: str) -> str:
    return f"{PREFIX}thread:{team}:{channel}:{thread_ts}"


def last_key(thread: ThreadKey) -> str:
    return f"{PREFIX}last:{thread}"


class SlackState:
    def __init__(self, redis: Redis, thread_ttl_secs: int) -> None:
        self.redis = redis
        self.thread_ttl = thread_ttl_secs

    async def in_thread(self, team: str, channel: str, thread_ts: str) -> bool:
        return bool(await self.redis.exists(thread_key(team, channel, thread_ts)))

    async def remember(
        self, *, join: tuple[str, str, str] | None = None, last: tuple[ThreadKey, str] | None = None
    ) -> None:
        """Record thread participation and/or the newest user message (one round trip)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            if join is not None and join[2]:
                pipe.set(thread_key(*join), b"1", ex=self.thread_ttl)
            if last is not None:
                pipe.set(last_key(last[0]), last[1].encode(), ex=LAST_TTL_SECS)
            await pipe.execute()

    async def last_message(self, thread: ThreadKey) -> tuple[str, str] | None:
        raw = await self.redis.get(last_key(thread))
        if not raw:
            return None
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        channel, _, ts = text.partition(" ")
        return (channel, ts) if ts else None
