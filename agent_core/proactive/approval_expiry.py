"""Approval prompts that nobody answered lose their buttons when their time runs out.

Each approval asked is also entered in ``keys.APPROVALS_DUE`` (a ZSET scored by its
expiry; :class:`~agent_core.agent.approvals.ApprovalStore`, ``timed``); a decision
takes it out.  The scheduler's leader (one process among all) calls
:meth:`ApprovalExpiry.tick` each tick: every entry past its time becomes an
``EXPIRY`` event for its conversation, queued like any message, so the worker that
owns the conversation handles it in order under the conversation's lock
(``Turn.expire_pending``): the prompt is edited to "expired, not run", the wait
ends, and the messages held meanwhile are answered.

At least once, never twice: the event is queued before its entry is removed, and its
id (``expire:<approval id>``) is deduplicated at ingest, so a leader that dies in
between leaves an entry the next leader queues again, to no effect.  With the
scheduler off (``SCHEDULER_ENABLED=false``) nothing is entered and a prompt closes
when someone next writes or presses a button there.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, cast

import orjson
from redis.asyncio import Redis

from agent_core.errors import StoreUnavailable
from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.store import keys

if TYPE_CHECKING:
    from agent_core.ingest import Ingest

log = logging.getLogger(__name__)

BATCH = 100  # entries per tick; the rest wait for the next one
GRACE_SECS = 1.0  # after the expiry, so every process's clock agrees it has passed


def expiry_event(thread: ThreadKey, approval_id: str) -> InboundEvent:
    return InboundEvent(
        event_id=f"expire:{approval_id}",
        kind=EventKind.EXPIRY,
        channel=thread.channel,
        thread=thread,
        user_id="parley",
        user_name="Parley",
        text=approval_id,
        received_at=time.time(),
    )


class ApprovalExpiry:
    def __init__(self, redis: Redis, ingest: Ingest) -> None:
        self.redis = redis
        self.ingest = ingest

    async def tick(self, now: float) -> int:
        """Queue an EXPIRY event for every approval past its time; how many."""
        due = cast(
            list[bytes],
            await self.redis.zrangebyscore(
                keys.APPROVALS_DUE, "-inf", now - GRACE_SECS, start=0, num=BATCH
            ),
        )
        queued = 0
        for member in due:
            try:
                thread_s, approval_id = orjson.loads(member)
                event = expiry_event(ThreadKey.parse(str(thread_s)), str(approval_id))
            except (ValueError, TypeError):
                log.warning("approval timer: malformed entry %r dropped", member[:80])
                await self.redis.zrem(keys.APPROVALS_DUE, member)
                continue
            try:
                await self.ingest.submit(event)
            except StoreUnavailable as exc:  # the inbox is full: the next tick tries again
                log.warning("approval timer: %s not queued yet (%s)", event.event_id, exc)
                break
            await self.redis.zrem(keys.APPROVALS_DUE, member)
            queued += 1
        return queued
