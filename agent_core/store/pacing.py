"""Shared send pacing across every worker process (platform flood limits).

A *pace* is a Redis key holding the next free send time on it (one per chat,
one per group, one global per bot...).  ``reserve`` books the next slot on all
the given paces in one round trip and tells the caller how long to sleep.
Every process shares the same keys, so N workers together still send at most
one message per interval per chat.

``pause`` pushes a pace's next slot to now + retry_after after a 429, so every
process waits exactly what the platform asked.

Streaming edits pass ``max_wait`` so they are skipped rather than queued
behind prompts and answers (an approval prompt is never starved by edits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from redis.asyncio import Redis

from agent_core.store import scripts
from agent_core.store.scripting import run_pipelined

PREFIX = "parley:pace:"


def pace_key(*parts: str) -> str:
    return PREFIX + ":".join(parts)


class Pacer:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._pace = redis.register_script(scripts.PACE)
        self._pause = redis.register_script(scripts.PACE_PAUSE)

    async def reserve(
        self, paces: Sequence[tuple[str, float]], *, max_wait: float | None = None
    ) -> float | None:
        """Book a slot on every (key, interval_s); return seconds to wait.

        With ``max_wait`` a slot further away than that is not booked on the
        pace that refused (returns None).
        """
        mw = -1 if max_wait is None else int(max_wait * 1000)
        res = await run_pipelined(
            self._redis,
            [(self._pace, [key], [int(interval * 1000), mw]) for key, interval in paces],
        )
        waits = [int(r) for r in res]
        if any(w < 0 for w in waits):
            return None
        return max(waits, default=0) / 1000

    async def wait(self, paces: Sequence[tuple[str, float]]) -> None:
        delay = await self.reserve(paces)
        if delay:
            await asyncio.sleep(delay)

    async def pause(self, key: str, seconds: float) -> None:
        await self._pause(keys=[key], args=[int(seconds * 1000)])
