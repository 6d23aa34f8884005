"""A rerun looks a reply part up on Slack when the worker sending it died between
claiming it and recording it: found, it is edited (never posted twice); missing, it
is posted (never lost).  Real slack_sdk against the fake Slack's message metadata
and conversations.history / .replies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.errors import LockLost
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from channels.slack.channel import SlackChannel
from tests.fakes.slack import TEAM, FakeSlack

DM = ThreadKey("slack", TEAM, "D1", "")


@pytest.fixture
async def quick(channel_factory: Callable[..., SlackChannel]) -> AsyncIterator[SlackChannel]:
    """Slack with a 1 s Web API timeout: a dead sender's request is over 6 s after
    its claim (the look-up waits for that)."""
    ch = channel_factory(slack_http_timeout=1)
    await ch.initialize()
    yield ch
    await ch.shutdown()


async def died_around_the_post(
    redis_clients: RedisClients, thread: ThreadKey, *, secs_ago: float
) -> dict[str, str]:
    """Part e1:0 in ``thread`` was claimed ``secs_ago`` by a worker that died before
    recording it; the thread's lock is the rerun's now.  The rerun's pending parts."""
    redis = redis_clients.redis
    claimed = int((time.time() - secs_ago) * 1000)
    await redis.hset(keys.sent(thread), "e1:0", f"pending:{claimed}-dead0000")
    await redis.set(keys.lock(thread), "w2")
    delivery = Delivery(redis, redis_clients.blocking)
    return (await delivery.begin(thread, "w2")).pending


def rerun(
    ch: SlackChannel, redis_clients: RedisClients, thread: ThreadKey, pending: dict[str, str]
) -> ReplyWriter:
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    guard = LockGuard(owner="w2")
    return ReplyWriter(ch.outbox(), delivery, thread, "e1", {}, guard, pending=pending)


async def first_post(
    ch: SlackChannel, redis_clients: RedisClients, thread: ThreadKey, text: str, event: str = "e1"
) -> MessageRef:
    """The dead worker's post of part ``event``:0 (it reached Slack)."""
    await redis_clients.redis.set(keys.lock(thread), "w1")
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    writer = ReplyWriter(ch.outbox(), delivery, thread, event, {}, LockGuard(owner="w1"))
    return await writer.say(OutboundMessage(text))


@pytest.mark.parametrize("where", ["dm", "thread"])
async def test_a_part_that_reached_slack_is_edited_not_posted_again(
    fake_slack: FakeSlack, quick: SlackChannel, redis_clients: RedisClients, where: str
) -> None:
    thread = DM
    if where == "thread":
        thread = ThreadKey("slack", TEAM, "C1", fake_slack.add_user_message("C1", "hi").ts)
    posted = await first_post(quick, redis_clients, thread, "Hello")
    pending = await died_around_the_post(redis_clients, thread, secs_ago=10)
    ref = await rerun(quick, redis_clients, thread, pending).say(OutboundMessage("Hello there"))
    assert ref.message_id == posted.message_id
    assert len(fake_slack.calls_to("chat.postMessage")) == 1
    [update] = fake_slack.calls_to("chat.update")
    assert update.args["ts"] == posted.message_id
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    assert await delivery.sent_ref(thread, "e1:0") == ref  # recorded: no second look-up


async def test_a_long_part_is_found_whole(
    fake_slack: FakeSlack, quick: SlackChannel, redis_clients: RedisClients
) -> None:
    """A part Slack shows as several messages: every one of them is found, in order,
    so the rerun's edit converges on all of them."""
    text = "\n\n".join(f"Paragraph {i}. " + "lorem ipsum " * 80 for i in range(12))
    posted = await first_post(quick, redis_clients, DM, text)
    assert posted.extra  # more than one message
    pending = await died_around_the_post(redis_clients, DM, secs_ago=10)
    ref = await rerun(quick, redis_clients, DM, pending).say(OutboundMessage(text))
    assert (ref.message_id, ref.extra) == (posted.message_id, posted.extra)
    assert len(fake_slack.calls_to("chat.postMessage")) == len(posted.extra.split(",")) + 1


async def test_a_part_that_never_reached_slack_is_posted(
    fake_slack: FakeSlack, quick: SlackChannel, redis_clients: RedisClients
) -> None:
    """The worker died between its claim and its request: the rerun posts the part
    (before: it waited 15 s and left the answer out)."""
    fake_slack.add_user_message("D1", "an older message")
    pending = await died_around_the_post(redis_clients, DM, secs_ago=10)
    started = time.monotonic()
    ref = await rerun(quick, redis_clients, DM, pending).say(OutboundMessage("Hello"))
    assert time.monotonic() - started < 5
    assert [c.args["text"] for c in fake_slack.calls_to("chat.postMessage")] == ["Hello"]
    [history] = fake_slack.calls_to("conversations.history")
    assert history.args["include_all_metadata"] in ("1", "true", "True")
    assert ref.message_id


async def test_the_look_up_waits_until_the_dead_request_is_over(
    fake_slack: FakeSlack, quick: SlackChannel, redis_clients: RedisClients
) -> None:
    """A claim younger than the Web API timeout (+ 5 s): the dead worker's post may
    still be arriving, so the look-up waits until it cannot be."""
    pending = await died_around_the_post(redis_clients, DM, secs_ago=5.5)
    started = time.monotonic()
    await rerun(quick, redis_clients, DM, pending).say(OutboundMessage("Hello"))
    assert time.monotonic() - started >= 0.4
    assert len(fake_slack.calls_to("conversations.history")) == 1


async def test_a_failed_look_up_falls_back_to_maybe_sent(
    fake_slack: FakeSlack, quick: SlackChannel, redis_clients: RedisClients
) -> None:
    """Slack cannot say (history rate-limited, a scope missing): as on Telegram,
    the part is waited for and then taken for maybe sent, never posted blindly."""
    fake_slack.fail("conversations.history", "missing_scope")
    pending = await died_around_the_post(redis_clients, DM, secs_ago=10)
    writer = rerun(quick, redis_clients, DM, pending)
    writer.part_wait_secs = 0.3
    ref = await writer.say(OutboundMessage("Hello"))
    assert ref.message_id == ""
    assert fake_slack.calls_to("chat.postMessage") == []


async def test_only_this_bots_messages_count(
    fake_slack: FakeSlack, quick: SlackChannel, redis_clients: RedisClients
) -> None:
    """Another app's message naming the same part (another Parley in the same
    workspace), and one of ours with malformed metadata, are not the part: the
    rerun posts it."""
    meta = {"event_type": "parley_part", "event_payload": {"part": "e1:0", "k": 0}}
    fake_slack.add_user_message("D1", "from another app", user="U_OTHER").metadata = meta
    odd = fake_slack.add_user_message("D1", "odd", user=fake_slack.bot_user)
    odd.metadata = {"event_type": "parley_part", "event_payload": {"part": "e1:0", "k": "x"}}
    pending = await died_around_the_post(redis_clients, DM, secs_ago=10)
    ref = await rerun(quick, redis_clients, DM, pending).say(OutboundMessage("Hello"))
    assert [c.args["text"] for c in fake_slack.calls_to("chat.postMessage")] == ["Hello"]
    assert ref.message_id not in ("", odd.ts)


async def test_a_private_answer_is_not_looked_up(
    fake_slack: FakeSlack, quick: SlackChannel, redis_clients: RedisClients
) -> None:
    """A /parley answer may have gone out through the command's response_url
    (ephemeral: no history shows it): taken for maybe sent, never answered twice."""
    pending = await died_around_the_post(redis_clients, DM, secs_ago=10)
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    reply_to = MessageRef("slack", "D1", "", extra="ru:" + fake_slack.response_url())
    writer = ReplyWriter(
        quick.outbox(), delivery, DM, "e1", {}, LockGuard(owner="w2"), reply_to, pending
    )
    writer.part_wait_secs = 0.3
    ref = await writer.say(OutboundMessage("Hello"))
    assert ref.message_id == ""
    assert fake_slack.calls_to("conversations.history") == []
    assert fake_slack.calls_to("chat.postMessage") == [] and fake_slack.responses == []


async def test_a_taken_over_part_that_waits_for_its_slot_is_posted_once(
    fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel], redis_clients: RedisClients
) -> None:
    """Found missing, claimed over the dead claim, then a wait for the channel's
    pace (the claim is given back meanwhile and made again after it): posted once,
    recorded."""
    ch = channel_factory(slack_http_timeout=1, slack_channel_pace_secs=1.0)
    await ch.initialize()
    try:
        await first_post(ch, redis_clients, DM, "an earlier answer", "e0")  # takes the slot
        pending = await died_around_the_post(redis_clients, DM, secs_ago=10)
        ref = await rerun(ch, redis_clients, DM, pending).say(OutboundMessage("B"))
        assert [c.args["text"] for c in fake_slack.calls_to("chat.postMessage")] == [
            "an earlier answer",
            "B",
        ]
        delivery = Delivery(redis_clients.redis, redis_clients.blocking)
        assert await delivery.sent_ref(DM, "e1:0") == ref
    finally:
        await ch.shutdown()


async def test_a_taken_over_part_is_fenced_like_any_other(
    fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel], redis_clients: RedisClients
) -> None:
    """The rerun found the part missing and claims it over the dead claim, then
    waits for the channel's pace; meanwhile the thread passes to another worker.
    The claim after the wait is refused like any other: nothing is posted by this
    execution (the other one sends the part)."""
    ch = channel_factory(slack_http_timeout=1, slack_channel_pace_secs=1.0)
    await ch.initialize()
    try:
        await first_post(ch, redis_clients, DM, "an earlier answer", "e0")  # takes the slot
        pending = await died_around_the_post(redis_clients, DM, secs_ago=10)
        task = asyncio.create_task(rerun(ch, redis_clients, DM, pending).say(OutboundMessage("B")))
        deadline = time.monotonic() + 5
        while not fake_slack.calls_to("conversations.history") and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # inside the pace wait (~1 s)
        await redis_clients.redis.set(keys.lock(DM), "w3")
        with pytest.raises(LockLost):
            await task
        assert [c.args["text"] for c in fake_slack.calls_to("chat.postMessage")] == [
            "an earlier answer"
        ]
    finally:
        await ch.shutdown()
