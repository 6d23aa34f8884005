"""A rerun resends a Discord reply part whose sender died after claiming it: the
part's nonces make Discord hand back the message it already created, so nothing is
missing and nothing shows twice (real discord.py HTTP client, the fake Discord)."""

from __future__ import annotations

import time

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.events import OutboundMessage, ThreadKey
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from channels.discord.sender import DiscordOutbox
from tests.fakes.discord import CHANNEL_ID, GUILD_ID, FakeDiscord

THREAD = ThreadKey("discord", GUILD_ID, CHANNEL_ID, "")
POSTS = rf"/channels/{CHANNEL_ID}/messages$"


async def died_after_claiming(
    redis_clients: RedisClients, delivery: Delivery, *, secs_ago: float
) -> dict[str, int]:
    """The thread's lock is the rerun's; part e1:0 was claimed ``secs_ago`` by a
    worker that died before recording it.  The rerun's view of its claims."""
    claimed = int((time.time() - secs_ago) * 1000)
    await redis_clients.redis.hset(keys.sent(THREAD), "e1:0", f"pending:{claimed}-dead0000")
    await redis_clients.redis.set(keys.lock(THREAD), "w2")
    state = await delivery.begin(THREAD, "w2")
    return state.pending


def rerun(outbox: DiscordOutbox, delivery: Delivery, pending: dict[str, int]) -> ReplyWriter:
    return ReplyWriter(outbox, delivery, THREAD, "e1", {}, LockGuard(owner="w2"), pending=pending)


async def test_a_part_that_reached_discord_is_not_shown_twice(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis_clients: RedisClients
) -> None:
    """The dead worker's request had created the message: the rerun's send of the
    same part gets that message back (same id, recorded, editable), no second one."""
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    await redis_clients.redis.set(keys.lock(THREAD), "w1")
    first = await ReplyWriter(outbox, delivery, THREAD, "e1", {}, LockGuard(owner="w1")).say(
        OutboundMessage("hello")
    )
    pending = await died_after_claiming(redis_clients, delivery, secs_ago=5)  # before the record
    assert set(pending) == {"e1:0"}
    again = await rerun(outbox, delivery, pending).say(OutboundMessage("hello"))
    assert again.message_id == first.message_id
    assert len(fake_discord.messages[CHANNEL_ID]) == 1
    assert [c.status for c in fake_discord.calls_to("POST", POSTS)] == [200, 200]
    assert await delivery.sent_ref(THREAD, "e1:0") == again


async def test_a_part_whose_request_never_left_is_sent_by_the_rerun(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis_clients: RedisClients
) -> None:
    """The worker died between the claim and the request: the rerun sends the part
    (before, it waited 15 s for it and then left it unsent)."""
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    pending = await died_after_claiming(redis_clients, delivery, secs_ago=30)
    started = time.monotonic()
    ref = await rerun(outbox, delivery, pending).say(OutboundMessage("hello"))
    assert time.monotonic() - started < 5
    assert [m["content"] for m in fake_discord.messages[CHANNEL_ID].values()] == ["hello"]
    assert await delivery.sent_ref(THREAD, "e1:0") == ref


async def test_a_claim_older_than_the_nonce_window_is_not_resent(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis_clients: RedisClients
) -> None:
    """Past ``idempotent_for_secs`` Discord may no longer recognise the nonce: the
    part is taken for maybe sent, as on the other platforms (never twice)."""
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    pending = await died_after_claiming(
        redis_clients, delivery, secs_ago=outbox.idempotent_for_secs + 10
    )
    w = rerun(outbox, delivery, pending)
    w.part_wait_secs = 0.3
    ref = await w.say(OutboundMessage("hello"))
    assert ref.message_id == ""  # unknown: never edited, never sent again
    assert fake_discord.calls_to("POST", POSTS) == []


async def test_a_part_another_execution_is_sending_is_not_doubled(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis_clients: RedisClients
) -> None:
    """Two executions of one turn overlap (a stalled worker, and the one that took
    the thread over): the claim finds the other's fresh claim, sends all the same,
    and Discord's nonce keeps it to one message."""
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    await redis_clients.redis.set(keys.lock(THREAD), "w1")
    stale = await ReplyWriter(outbox, delivery, THREAD, "e1", {}, LockGuard(owner="w1")).say(
        OutboundMessage("hello")
    )
    claimed = int(time.time() * 1000)
    await redis_clients.redis.hset(keys.sent(THREAD), "e1:0", f"pending:{claimed}-other000")
    await redis_clients.redis.set(keys.lock(THREAD), "w2")
    ref = await ReplyWriter(outbox, delivery, THREAD, "e1", {}, LockGuard(owner="w2")).say(
        OutboundMessage("hello")
    )
    assert ref.message_id == stale.message_id
    assert len(fake_discord.messages[CHANNEL_ID]) == 1
