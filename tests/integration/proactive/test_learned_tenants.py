"""The tenant learned for short notification targets (``slack:C1``) is kept per
conversation with a TTL, rewritten at most once a day: conversations that went
quiet leave nothing behind, and a busy one costs no write per message."""

from __future__ import annotations

from typing import Any

from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.proactive.routines import RoutineStore
from agent_core.proactive.runner import EventTriggers
from agent_core.proactive.targets import resolve_target
from agent_core.store import keys


def message(n: int, conversation: str, tenant: str = "T1") -> InboundEvent:
    return InboundEvent(
        event_id=f"e{n}",
        kind=EventKind.MESSAGE,
        channel="slack",
        thread=ThreadKey("slack", tenant, conversation),
        user_id="U1",
        text="hi",
    )


async def test_learned_tenants_expire_and_are_rewritten_at_most_daily(redis: Any) -> None:
    now = [1000.0]
    triggers = EventTriggers(redis, RoutineStore(redis), monotonic=lambda: now[0])
    for i in range(20):  # no routine defined at all
        await triggers(message(i, f"D{i}"))
    assert await redis.exists(keys.TENANTS) == 0
    for i in range(20):
        assert 0 < await redis.ttl(keys.tenant("slack", f"D{i}")) <= keys.TENANT_TTL_SECS

    await redis.delete(keys.tenant("slack", "D0"))
    await triggers(message(100, "D0", "T2"))  # the same day: not written again
    assert await redis.exists(keys.tenant("slack", "D0")) == 0
    now[0] += 86_400
    await triggers(message(101, "D0", "T2"))
    assert await redis.get(keys.tenant("slack", "D0")) == b"T2"


async def test_short_targets_use_the_learned_tenant_and_keep_it(redis: Any) -> None:
    triggers = EventTriggers(redis, RoutineStore(redis))
    await triggers(message(1, "C1"))
    await redis.expire(keys.tenant("slack", "C1"), 60)
    assert await resolve_target(redis, "slack:C1") == ThreadKey("slack", "T1", "C1", "")
    assert await redis.ttl(keys.tenant("slack", "C1")) > 60  # a notification renews it


async def test_tenants_learned_by_an_earlier_version_are_still_used_then_moved(
    redis: Any,
) -> None:
    await redis.hset(keys.TENANTS, "slack:C9", "T5")
    assert await resolve_target(redis, "slack:C9") == ThreadKey("slack", "T5", "C9", "")
    await EventTriggers(redis, RoutineStore(redis))(message(1, "C9", "T6"))
    assert await redis.exists(keys.TENANTS) == 0
    assert await resolve_target(redis, "slack:C9") == ThreadKey("slack", "T6", "C9", "")
