"""A thread's ``next`` (the arrival number its next event runs at) lives as long
after every turn as the arrival counter after every event: a turn that does not
move it on still renews it, so it never dies while the counter lives (the next
message would wait for arrivals that never come)."""

from __future__ import annotations

from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery

T = ThreadKey("web", "local", "a")


def msg(n: int) -> InboundEvent:
    return InboundEvent(
        event_id=f"e{n}", kind=EventKind.MESSAGE, channel="web", thread=T, user_id="u1", text="hi"
    )


async def test_a_turn_renews_next_even_when_it_does_not_move_it(
    redis_clients: RedisClients,
) -> None:
    redis = redis_clients.redis
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    await redis.set(keys.next_seq(T), 5, px=60_000)  # set by a turn long ago, nearly gone
    assert await d.handoff([(b"1-1", msg(1))], "w1") == [T]
    left = await d.complete(
        T, "w1", consumed=[msg(1)], session_json=None, version=0, sent_fields=[], next_seq=0
    )
    assert left == 0
    assert await redis.get(keys.next_seq(T)) == b"5"
    assert await redis.pttl(keys.next_seq(T)) > 60_000
    assert await redis.pttl(keys.next_seq(T)) <= d.next_ttl_ms


async def test_a_turn_does_not_create_next(redis_clients: RedisClients) -> None:
    redis = redis_clients.redis
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    assert await d.handoff([(b"1-1", msg(1))], "w1") == [T]
    await d.complete(
        T, "w1", consumed=[msg(1)], session_json=None, version=0, sent_fields=[], next_seq=0
    )
    assert await redis.exists(keys.next_seq(T)) == 0
