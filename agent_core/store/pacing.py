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

A request that creates a message passes the agent's wire claim
(``agent_core.outbox.wire_claim()``): it rides in the booking's round trip and
is kept only when no wait is due (the claim must come after any pacing wait, so
that a crash leaves a part unsure only during the request itself); otherwise it
is taken back in a second round trip and ``on_wire()`` claims again after the
wait (finding the early claim its own, should taking it back have failed).
Every script stays on its own keys (a pace key, the thread's keys), so the
pipeline runs on a Redis Cluster too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.outbox import WireClaim, wire_claimed
from agent_core.store import scripts
from agent_core.store.scripting import Call, run_pipelined

log = logging.getLogger(__name__)

PREFIX = "parley:pace:"


def pace_key(*parts: str) -> str:
    return PREFIX + ":".join(parts)


class Pacer:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._pace = redis.register_script(scripts.PACE)
        self._pause = redis.register_script(scripts.PACE_PAUSE)

    async def reserve(
        self,
        paces: Sequence[tuple[str, float]],
        *,
        max_wait: float | None = None,
        claim: WireClaim | None = None,
    ) -> float | None:
        """Book a slot on every (key, interval_s); return seconds to wait.

        With ``max_wait`` a slot further away than that is not booked on the
        pace that refused (returns None).  With ``claim`` (the agent's wire
        claim) the claim is made in the same round trip when the wait is 0 (then
        ``on_wire()`` does nothing); a refused claim raises here, as the hook
        would.  A claim made while a wait is due is taken back.
        """
        wait, booked = await self.book(paces, max_wait=max_wait, claim=claim)
        return wait if booked else None

    async def book(
        self,
        paces: Sequence[tuple[str, float]],
        *,
        max_wait: float | None = None,
        claim: WireClaim | None = None,
    ) -> tuple[float, bool]:
        """:meth:`reserve`, saying how far the slot is when it is refused: (the
        wait, True) when booked; (how long the pace that refused is taken for,
        False) when a slot is further away than ``max_wait``."""
        mw = -1 if max_wait is None else int(max_wait * 1000)
        calls: list[Call] = [
            (self._pace, [key], [int(interval * 1000), mw]) for key, interval in paces
        ]
        if claim is not None:
            calls.append(claim.call)
        try:
            res = await run_pipelined(self._redis, calls)
        except RedisError:
            if claim is not None:  # the claim may have been made: take it back if so
                await self._take_back(claim)
            raise
        waits = [int(r) for r in res[: len(paces)]]
        # a refused pace answers -1 - its wait (-1 alone: a script before this one)
        far = [-w - 1 for w in waits if w < 0]
        if claim is not None:
            await self._keep_or_take_back(claim, res[-1], bool(far) or max(waits, default=0) > 0)
        if far:
            return max(far) / 1000, False
        return max(waits, default=0) / 1000, True

    async def _keep_or_take_back(self, claim: WireClaim, reply: Any, waiting: bool) -> None:
        if not waiting or int(reply[0]) != 0:  # claimed with no wait due, or not claimed
            wire_claimed()
            claim.settle(reply)  # may raise: lock lost, part sent by another execution
            return
        await self._take_back(claim)

    async def _take_back(self, claim: WireClaim) -> None:
        """Remove the early claim (if it is there and still exactly ours).  If that
        fails, on_wire() after the wait claims again and, finding this send's own
        marker, keeps it, checking the lock as any claim does."""
        try:
            await claim.release()
        except RedisError as exc:
            log.warning("could not take back an early part claim (%s)", type(exc).__name__)

    async def wait(self, paces: Sequence[tuple[str, float]]) -> None:
        delay = await self.reserve(paces)
        if delay:
            await asyncio.sleep(delay)

    async def pause(self, key: str, seconds: float) -> None:
        await self._pause(keys=[key], args=[int(seconds * 1000)])
