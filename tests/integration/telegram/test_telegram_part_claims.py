"""A reply part's claim rides in the Telegram sender's pacing round trip: through the
agent's ReplyWriter, the real python-telegram-bot and the fake Bot API."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.errors import LockLost, SendFailed
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from channels.telegram import TelegramChannel
from tests.fakes.telegram import FakeTelegram

DM = ThreadKey("telegram", "123456", "42")
OWNER = "worker-1:token"


def writer(channel: TelegramChannel, delivery: Delivery, event: str = "e1") -> ReplyWriter:
    return ReplyWriter(channel.outbox(), delivery, DM, event, {}, LockGuard(owner=OWNER))


# a part Telegram splits into several messages
LONG = "\n\n".join(f"Paragraph {i}. " + "lorem ipsum " * 60 for i in range(10))


def fail_after_the_first(
    fake: FakeTelegram, code: int, *args: str, **kw: int
) -> asyncio.Task[None]:
    """Once the first sendMessage is in, the next one fails like this (the chat's
    next slot is 0.2 s away, time enough to arm it)."""

    async def arm() -> None:
        while not fake.calls_of("sendMessage"):
            await asyncio.sleep(0.005)
        fake.fail_next("sendMessage", code, *args, **kw)

    return asyncio.create_task(arm())


async def test_a_message_costs_one_round_trip_before_it_is_sent(
    fake: FakeTelegram,
    channel: TelegramChannel,
    redis_clients: RedisClients,
    packets: collections.Counter[str],
) -> None:
    """No pacing wait due: the booking and the claim are one round trip, the
    record after the send a second (three before the claim rode along)."""
    redis = redis_clients.redis
    delivery = Delivery(redis, redis_clients.blocking)
    other = ThreadKey("telegram", "123456", "43")
    for thread in (DM, other):
        await redis.set(keys.lock(thread), OWNER)
    # a first message elsewhere loads the scripts into this fresh server
    await ReplyWriter(channel.outbox(), delivery, other, "e0", {}, LockGuard(owner=OWNER)).say(
        OutboundMessage("warm")
    )
    packets.clear()
    await writer(channel, delivery).say(OutboundMessage("hello"))
    assert packets == {"EVALSHA": 1, "HSET": 1}
    assert [c.params["text"] for c in fake.calls_of("sendMessage")] == ["warm", "hello"]
    assert await delivery.sent_ref(DM, "e1:0") is not None  # recorded


async def test_a_message_that_waits_for_its_slot_is_claimed_after_the_wait(
    fake: FakeTelegram, channel: TelegramChannel, redis_clients: RedisClients
) -> None:
    """The chat's slot is taken: the early claim is taken back, the part claimed
    again after the wait and sent once (no stall on its own claim)."""
    redis = redis_clients.redis
    delivery = Delivery(redis, redis_clients.blocking)
    await redis.set(keys.lock(DM), OWNER)
    await writer(channel, delivery, "e0").say(OutboundMessage("first"))  # takes the slot
    started = time.monotonic()
    await writer(channel, delivery).say(OutboundMessage("second"))
    took = time.monotonic() - started
    assert 0.1 < took < 5, took  # waited for the chat's 0.2 s slot, not 15 s
    assert [c.params["text"] for c in fake.calls_of("sendMessage")] == ["first", "second"]
    assert await delivery.sent_ref(DM, "e1:0") is not None


async def test_a_stale_execution_sends_nothing(
    fake: FakeTelegram, channel: TelegramChannel, redis_clients: RedisClients
) -> None:
    """The thread's lock belongs to another worker: the claim in the booking
    refuses, the writer learns its lock is lost, and nothing reaches Telegram."""
    redis = redis_clients.redis
    delivery = Delivery(redis, redis_clients.blocking)
    await redis.set(keys.lock(DM), "worker-2:token")
    w = writer(channel, delivery)
    with pytest.raises(LockLost):
        await w.say(OutboundMessage("late"))
    assert w.guard.lost
    assert fake.calls_of("sendMessage") == []
    assert await delivery.sent_ref(DM, "e1:0") is None


async def test_a_message_waiting_out_flood_control_is_unclaimed_meanwhile(
    fake: FakeTelegram, channel: TelegramChannel, redis_clients: RedisClients
) -> None:
    """Telegram answered 429: the message was not created.  While the sender waits
    ``retry_after`` its part is not claimed (a crash then leaves it to the rerun,
    not 'maybe sent'); the next attempt claims it again and sends it once."""
    redis = redis_clients.redis
    delivery = Delivery(redis, redis_clients.blocking)
    await redis.set(keys.lock(DM), OWNER)
    fake.fail_next("sendMessage", 429, retry_after=1)
    task = asyncio.create_task(writer(channel, delivery).say(OutboundMessage("hello")))
    deadline = time.monotonic() + 5
    while not any(c.method == "sendMessage" for c in fake.calls) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)  # inside the 1 s wait
    assert await redis.hget(keys.sent(DM), "e1:0") is None
    await task
    assert [c.status for c in fake.calls if c.method == "sendMessage"] == [429, 200]
    assert await delivery.sent_ref(DM, "e1:0") is not None


async def test_a_long_part_keeps_its_claim_when_a_later_message_waits(
    fake: FakeTelegram, channel: TelegramChannel, redis_clients: RedisClients
) -> None:
    """A part Telegram splits into several messages: once the first is on screen,
    a 429 on the next does not give the claim back (a rerun would otherwise send
    the whole answer again, the first message twice)."""
    redis = redis_clients.redis
    delivery = Delivery(redis, redis_clients.blocking)
    await redis.set(keys.lock(DM), OWNER)
    arm = fail_after_the_first(fake, 429, retry_after=1)
    task = asyncio.create_task(writer(channel, delivery).say(OutboundMessage(LONG)))
    await arm
    deadline = time.monotonic() + 5
    while (
        not any(c.status == 429 for c in fake.calls if c.method == "sendMessage")
        and time.monotonic() < deadline
    ):
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)  # inside the 1 s wait
    assert (await redis.hget(keys.sent(DM), "e1:0") or b"").startswith(b"pending:")
    await task
    assert [c.status for c in fake.calls if c.method == "sendMessage"] == [200, 429, 200]


async def test_a_refused_message_gives_its_claim_back(
    fake: FakeTelegram, channel: TelegramChannel, redis_clients: RedisClients
) -> None:
    """Telegram refused the message for good (403: the user blocked the bot): it
    is not on screen, so its claim is taken back.  A rerun after a crash then
    tries the part again instead of waiting 15 s for it and skipping it."""
    redis = redis_clients.redis
    delivery = Delivery(redis, redis_clients.blocking)
    await redis.set(keys.lock(DM), OWNER)
    fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    with pytest.raises(SendFailed):
        await writer(channel, delivery).say(OutboundMessage("hello"))
    assert [c.status for c in fake.calls if c.method == "sendMessage"] == [403]
    assert await redis.hget(keys.sent(DM), "e1:0") is None
    # the rerun's writer sends it (no wait for a claim nobody holds)
    started = time.monotonic()
    await writer(channel, delivery).say(OutboundMessage("hello"))
    assert time.monotonic() - started < 5
    assert [c.status for c in fake.calls if c.method == "sendMessage"] == [403, 200]


async def test_a_long_part_refused_after_its_first_message_keeps_its_claim(
    fake: FakeTelegram, channel: TelegramChannel, redis_clients: RedisClients
) -> None:
    """The first message of a long part is on screen when Telegram refuses the
    next: the part stays claimed, recorded as that message (ChannelError.partial_ref),
    so a rerun edits it and never sends the first message twice."""
    redis = redis_clients.redis
    delivery = Delivery(redis, redis_clients.blocking)
    await redis.set(keys.lock(DM), OWNER)
    arm = fail_after_the_first(fake, 403, "Forbidden: bot was blocked by the user")
    with pytest.raises(SendFailed):
        await writer(channel, delivery).say(OutboundMessage(LONG))
    await arm
    assert [c.status for c in fake.calls if c.method == "sendMessage"] == [200, 403]
    recorded = await delivery.sent_ref(DM, "e1:0")
    assert isinstance(recorded, MessageRef) and recorded.message_id
    assert len(channel.outbox().message_ids(recorded)) == 1  # the one message out


async def test_a_part_whose_other_claim_is_given_back_is_sent_here(
    fake: FakeTelegram,
    channel: TelegramChannel,
    redis_clients: RedisClients,
    packets: collections.Counter[str],
) -> None:
    """Another execution of the turn claimed the part, then gave the claim back (its
    send was refused, or it waits out a 429 and will claim again): this execution,
    which found the claim and waited, claims it now and sends it, instead of taking
    it for maybe sent and leaving the answer out."""
    redis = redis_clients.redis
    delivery = Delivery(redis, redis_clients.blocking)
    await redis.set(keys.lock(DM), OWNER)
    await redis.hset(keys.sent(DM), "e1:0", f"pending:{int(time.time() * 1000)}-other000")
    packets.clear()
    task = asyncio.create_task(writer(channel, delivery).say(OutboundMessage("hello")))
    deadline = time.monotonic() + 5
    while not packets["HGET"] and time.monotonic() < deadline:  # it polls the other's record
        await asyncio.sleep(0.01)
    assert packets["HGET"] and fake.calls_of("sendMessage") == []  # waiting for the other
    await redis.hdel(keys.sent(DM), "e1:0")  # which gives its claim back
    ref = await asyncio.wait_for(task, 5)
    assert [c.params["text"] for c in fake.calls_of("sendMessage")] == ["hello"]
    assert await delivery.sent_ref(DM, "e1:0") == ref
