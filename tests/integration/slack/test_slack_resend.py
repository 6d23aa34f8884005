"""A rerun looks a reply part up on Slack when the worker sending it died between
claiming it and recording it: found, it is edited (never posted twice); missing, it
is posted (never lost).  Real slack_sdk against the fake Slack's message metadata
and conversations.history / .replies."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pytest

from agent_core.agent.reply import LockGuard, ReplyWriter
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
) -> dict[str, int]:
    """Part e1:0 in ``thread`` was claimed ``secs_ago`` by a worker that died before
    recording it; the thread's lock is the rerun's now.  The rerun's pending parts."""
    redis = redis_clients.redis
    claimed = int((time.time() - secs_ago) * 1000)
    await redis.hset(keys.sent(thread), "e1:0", f"pending:{claimed}-dead0000")
    await redis.set(keys.lock(thread), "w2")
    delivery = Delivery(redis, redis_clients.blocking)
    return (await delivery.begin(thread, "w2")).pending


def rerun(
    ch: SlackChannel, redis_clients: RedisClients, thread: ThreadKey, pending: dict[str, int]
) -> ReplyWriter:
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    guard = LockGuard(owner="w2")
    return ReplyWriter(ch.outbox(), delivery, thread, "e1", {}, guard, pending=pending)


async def first_post(
    ch: SlackChannel, redis_clients: RedisClients, thread: ThreadKey, text: str
) -> MessageRef:
    """The dead worker's post of part e1:0 (it reached Slack)."""
    await redis_clients.redis.set(keys.lock(thread), "w1")
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    writer = ReplyWriter(ch.outbox(), delivery, thread, "e1", {}, LockGuard(owner="w1"))
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
