"""Ingest: the only door into Parley for inbound events.

``Ingest.submit(event)`` runs the inbound pipeline, built once from a list (like
Starlette's middleware stack)::

    filters (e.g. /interrupt) -> claim + publish (one script: SET NX EX 24 h, XADD)

and returns only when the event is durably in the inbox stream (or was a
duplicate / refused).  Claim and publish are one atomic script, so an event is
never claimed without being published: if Redis fails,
:class:`~agent_core.errors.StoreUnavailable` is raised, the webhook answers
5xx and the platform's retry gets through.  A caller must not acknowledge the platform
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
from agent_core.store import keys, scripts
from agent_core.store.scripting import run_script

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
        self._ingest = redis.register_script(scripts.INGEST)
        self._trim = redis.register_script(scripts.TRIM_ACKED)
        self.counts: dict[str, int] = {s.value: 0 for s in Submitted}

    def add_filter(self, f: InboundFilter) -> None:
        self._filters.append(f)

    async def submit(self, event: InboundEvent) -> Submitted:
        try:
            for f in self._filters:
                reason = await f(event)
                if reason is not None:
                    self.counts[Submitted.REFUSED] += 1
                    METRICS.inc("parley_refused_total", reason=reason.split(":")[0][:40])
                    log.info("[%s] event %s refused: %s", event.thread, event.event_id, reason)
                    return Submitted.REFUSED
            published = await self._publish(event)
            if published == -1:
                # full: drop what the workers are done with, then try once more
                await run_script(self._redis, self._trim, [keys.INBOX_STREAM], [keys.INBOX_GROUP])
                published = await self._publish(event)
        except RedisError as exc:
            # Nothing was claimed unless the event was also published (one script):
            # the platform's retry gets through.
            raise StoreUnavailable(f"cannot publish event: {type(exc).__name__}") from exc
        if published == -1:
            # Never trim what no worker has finished: refuse instead, so the platform
            # retries later (Telegram and Slack do; the web page says so).
            METRICS.inc("parley_inbox_full_total", channel=event.channel)
            log.error(
                "inbox full (%d events waiting, STREAM_MAXLEN): event %s:%s refused",
                self._maxlen,
                event.channel,
                event.event_id,
            )
            raise StoreUnavailable("the inbox is full (STREAM_MAXLEN); try again later")
        if not published:
            self.counts[Submitted.DUPLICATE] += 1
            METRICS.inc("parley_dedup_drops_total", channel=event.channel)
            log.debug("duplicate event %s:%s dropped", event.channel, event.event_id)
            return Submitted.DUPLICATE
        self.counts[Submitted.ACCEPTED] += 1
        METRICS.inc("parley_events_in_total", channel=event.channel)
        return Submitted.ACCEPTED

    async def _publish(self, event: InboundEvent) -> int:
        return int(
            await run_script(
                self._redis,
                self._ingest,
                [
                    keys.dedup(event.channel, event.event_id),
                    keys.INBOX_STREAM,
                    keys.seq(event.thread),
                ],
                [self._dedup_ttl, self._maxlen, event.to_json(), keys.SEQ_TTL_SECS],
            )
        )
