"""Ingest: the only door into Parley for inbound events.

``Ingest.submit(event)`` runs the inbound pipeline, built once from a list (like
Starlette's middleware stack)::

    dedup (SET NX EX 24 h) -> filters (allowlist, rate window, ...) -> publish (XADD)

and returns only when the event is durably in the inbox stream (or was a
duplicate / refused).  If publishing fails the dedup claim is released and
:class:`~agent_core.errors.StoreUnavailable` is raised, so the webhook answers
5xx and the platform retries.  A caller must not acknowledge the platform
(HTTP 2xx, polling offset) before ``submit`` returns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.errors import StoreUnavailable
from agent_core.events import InboundEvent
from agent_core.metrics import METRICS
from agent_core.store import keys

log = logging.getLogger(__name__)


class Submitted(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    REFUSED = "refused"  # a filter said no (and may have told the user why)


# A filter returns None to let the event through, or a reason string to refuse it.
InboundFilter = Callable[[InboundEvent], Awaitable[str | None]]


class Ingest:
    def __init__(
        self,
        redis: Redis,
        *,
        dedup_ttl_secs: int = 86_400,
        stream_maxlen: int = 100_000,
        filters: Sequence[InboundFilter] = (),
    ) -> None:
        self._redis = redis
        self._dedup_ttl = dedup_ttl_secs
        self._maxlen = stream_maxlen
        self._filters = list(filters)
        self.counts: dict[str, int] = {s.value: 0 for s in Submitted}

    def add_filter(self, f: InboundFilter) -> None:
        self._filters.append(f)

    async def submit(self, event: InboundEvent) -> Submitted:
        dedup_key = keys.dedup(event.channel, event.event_id)
        try:
            claimed = await self._redis.set(dedup_key, b"1", nx=True, ex=self._dedup_ttl)
        except RedisError as exc:
            raise StoreUnavailable(f"cannot reach Redis: {type(exc).__name__}") from exc
        if not claimed:
            self.counts[Submitted.DUPLICATE] += 1
            METRICS.inc("parley_dedup_drops_total", channel=event.channel)
            log.debug("duplicate event %s:%s dropped", event.channel, event.event_id)
            return Submitted.DUPLICATE
        try:
            for f in self._filters:
                reason = await f(event)
                if reason is not None:
                    self.counts[Submitted.REFUSED] += 1
                    METRICS.inc("parley_refused_total", reason=reason.split(":")[0][:40])
                    log.info("[%s] event %s refused: %s", event.thread, event.event_id, reason)
                    return Submitted.REFUSED
            await self._redis.xadd(
                keys.INBOX_STREAM,
                {b"e": event.to_json()},
                maxlen=self._maxlen,
                approximate=True,
            )
        except BaseException as exc:
            # Never drop after claiming: release the claim so a retry gets in.
            try:
                await self._redis.delete(dedup_key)
            except RedisError:
                log.warning("could not release dedup claim %s", dedup_key)
            if isinstance(exc, RedisError):
                raise StoreUnavailable(f"cannot publish event: {type(exc).__name__}") from exc
            raise
        self.counts[Submitted.ACCEPTED] += 1
        METRICS.inc("parley_events_in_total", channel=event.channel)
        return Submitted.ACCEPTED
