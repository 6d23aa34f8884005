"""An event routine and a platform's redelivery of the message that triggered it."""

from __future__ import annotations

from typing import Any

from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.ingest import Ingest, Submitted
from agent_core.proactive.routines import Routine, RoutineStore
from agent_core.proactive.runner import EventTriggers
from agent_core.store import keys


def outage(update: int) -> InboundEvent:
    return InboundEvent(
        event_id=f"bot1:{update}",
        kind=EventKind.MESSAGE,
        channel="telegram",
        thread=ThreadKey("telegram", "bot1", "42"),
        user_id="u",
        text="we have an outage",
    )


async def test_a_redelivered_message_queues_its_event_routine_once(redis: Any) -> None:
    """What the user saw: an event routine (no cooldown, no dedup window) ran twice
    for one message, when Telegram delivered the same update again.  Ingest drops
    the redelivery as a duplicate, but the trigger filter runs before that check and
    queued the routine on every delivery.  Now it queues a run once per inbound event
    id; another message with the same text still triggers it."""
    store = RoutineStore(redis)
    await store.add(
        Routine(
            name="alert",
            trigger="event",
            prompt="p",
            notify="web:local:x",
            pattern="outage",
            cooldown_secs=0,
        )
    )
    ingest = Ingest(redis, filters=[EventTriggers(redis, store)])
    assert await ingest.submit(outage(1001)) == Submitted.ACCEPTED
    assert await ingest.submit(outage(1001)) == Submitted.DUPLICATE  # the redelivery
    assert await redis.llen(keys.ROUTINE_QUEUE) == 1
    assert await ingest.submit(outage(1002)) == Submitted.ACCEPTED  # a new message
    assert await redis.llen(keys.ROUTINE_QUEUE) == 2
