"""The Slack channel's own Redis keys (prefix ``parley:slack:``).

* ``parley:slack:thread:<team>:<channel>:<thread_ts>`` -- Parley takes part in
  this thread: plain replies in it are follow-ups (no mention needed). TTL.
  ``1`` once Parley posted there (an answer or a notice, anything but an access
  refusal); ``p:<event id>`` while the mention (or other event) that brought
  Parley in waits for its turn: followed meanwhile, forgotten when that turn ends
  with no post but an access refusal (its sender off ALLOWED_USERS, too fast,
  ...), so a refused stranger's mention does not make Parley follow the thread.
* ``parley:slack:last:<thread key>`` -- "<channel> <ts>" of the newest user
  message of a thread, so the worker can put the working reaction on it. TTL.
* ``parley:slack:reacted:<thread key>`` -- set of "<channel> <ts>": every message
  the working reaction was put on during the thread's turn (a message merged into
  a running turn gets it too), all taken off when the turn ends, by whichever
  worker ends it. TTL.
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


def reacted_key(thread: ThreadKey) -> str:
    return f"{PREFIX}reacted:{thread}"


PENDING = "p:"
# delete KEYS[1] if it still holds ARGV[1] (the pending mark of one event)
_FORGET_PENDING = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class SlackState:
    def __init__(self, redis: Redis, thread_ttl_secs: int) -> None:
        self.redis = redis
        self.thread_ttl = thread_ttl_secs

    async def in_thread(self, team: str, channel: str, thread_ts: str) -> bool:
        return bool(await self.redis.exists(thread_key(team, channel, thread_ts)))

    async def remember(
        self,
        *,
        join: tuple[str, str, str] | None = None,
        last: tuple[ThreadKey, str] | None = None,
        pending: str = "",
        refusal: bool = False,
    ) -> None:
        """Record thread participation and/or the newest user message (one round trip).

        ``pending``: the id of an accepted event in the thread, not yet answered: the
        thread is followed, marked as that event's (unless already followed; its time
        starts again either way) until :meth:`forget_pending` or a post.  Without
        it, Parley posted there: ``refusal`` (an access refusal) leaves the thread's
        mark as it is (its time starts again; none is made), any other post (an
        answer, a notice) makes the thread followed outright."""
        async with self.redis.pipeline(transaction=False) as pipe:
            if join is not None and join[2]:
                key = thread_key(*join)
                if pending:
                    pipe.set(key, (PENDING + pending).encode(), ex=self.thread_ttl, nx=True)
                    pipe.expire(key, self.thread_ttl)
                elif refusal:
                    pipe.expire(key, self.thread_ttl)
                else:
                    pipe.set(key, b"1", ex=self.thread_ttl)
            if last is not None:
                pipe.set(last_key(last[0]), last[1].encode(), ex=LAST_TTL_SECS)
            await pipe.execute()

    async def forget_pending(self, join: tuple[str, str, str], event_id: str) -> bool:
        """Stop following the thread if only ``event_id`` brought Parley in and it was
        not answered there (the mark is still that event's); True if forgotten."""
        forgotten = await self.redis.eval(
            _FORGET_PENDING, 1, thread_key(*join), (PENDING + event_id).encode()
        )
        return bool(forgotten)

    async def last_message(self, thread: ThreadKey) -> tuple[str, str] | None:
        raw = await self.redis.get(last_key(thread))
        if not raw:
            return None
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        channel, _, ts = text.partition(" ")
        return (channel, ts) if ts else None

    async def reacting(self, thread: ThreadKey, target: tuple[str, str]) -> bool:
        """Record that the working reaction goes on ``target`` (before it is put
        on); False if it was recorded already in this turn."""
        key = reacted_key(thread)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.sadd(key, f"{target[0]} {target[1]}".encode())
            pipe.expire(key, LAST_TTL_SECS)
            added, _ = await pipe.execute()
        return bool(added)

    async def not_reacting(self, thread: ThreadKey, target: tuple[str, str]) -> None:
        """Undo :meth:`reacting`: the reaction was not put on (a later call may)."""
        await self.redis.srem(reacted_key(thread), f"{target[0]} {target[1]}".encode())

    async def reacted(self, thread: ThreadKey) -> set[tuple[str, str]]:
        """The messages the working reaction is on in the thread's current turn."""
        return set(_targets(await self.redis.smembers(reacted_key(thread))))

    async def take_reacted(self, thread: ThreadKey) -> list[tuple[str, str]]:
        """Every message the working reaction was put on in ``thread``, forgotten."""
        key = reacted_key(thread)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.smembers(key)
            pipe.delete(key)
            members, _ = await pipe.execute()
        return _targets(members)


def _targets(members: set[bytes]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for raw in sorted(members):
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        channel, _, ts = text.partition(" ")
        if ts:
            out.append((channel, ts))
    return out
