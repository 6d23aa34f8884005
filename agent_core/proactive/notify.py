"""Proactive messages: send to a channel target with no inbound event.

The text goes through the target channel's own Outbox (the same one replies
use), so rendering, splitting at the platform limit and the platform's rate
limits are the same as for any answer.  Each notification carries a dedup key
chosen by the caller (``routine:<id>:<fire>``, ``hb:<tick>``): the key is
claimed in Redis (SET NX, 24 h) right before the send, so a rerun after a
crash never sends it twice; a send that fails before reaching the platform
releases the claim so a later attempt may send it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from redis.asyncio import Redis

from agent_core.errors import ChannelError
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.outbox import Outbox
from agent_core.proactive.targets import resolve_target
from agent_core.store import keys

log = logging.getLogger(__name__)

DEDUP_TTL_SECS = 86_400


class Notifier:
    def __init__(
        self,
        redis: Redis,
        outboxes: Mapping[str, Outbox],
        tenants: Mapping[str, str] | None = None,
    ) -> None:
        self.redis = redis
        self.outboxes = outboxes
        self.tenants = dict(tenants or {})

    async def resolve(self, target: str | ThreadKey) -> ThreadKey:
        if isinstance(target, ThreadKey):
            return target
        return await resolve_target(self.redis, target, self.tenants)

    async def notify(
        self, target: str | ThreadKey, text: str, dedup_key: str, *, notice: bool = False
    ) -> MessageRef | None:
        """Send ``text`` to ``target`` once per ``dedup_key``; None if sent before.

        Raises TargetError (bad target), ChannelError (the platform refused).
        """
        thread = await self.resolve(target)
        outbox = self.outboxes.get(thread.channel)
        if outbox is None:
            raise ChannelError(f"channel {thread.channel} is not enabled in this process")
        claim = keys.notified(dedup_key)
        if not await self.redis.set(claim, str(thread), nx=True, ex=DEDUP_TTL_SECS):
            log.info("[%s] notification %s already sent; skipped", thread, dedup_key)
            return None
        try:
            ref = await outbox.send(thread, OutboundMessage(text, notice=notice))
        except ChannelError:
            await self.redis.delete(claim)
            raise
        log.info("[%s] notification %s sent", thread, dedup_key)
        return ref
