"""Sends that Telegram refuses at first and that still reach the user."""

from __future__ import annotations

import dataclasses
import time

import pytest
from redis.asyncio import Redis

from agent_core.errors import SendFailed, SendRateLimited
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from channels.telegram import TelegramChannel
from tests.fakes.telegram import FakeTelegram
from tests.integration.telegram.conftest import FAST, make_channel

FORUM = -100777
TOPIC = ThreadKey("telegram", "123456", str(FORUM), "55")
GROUP = ThreadKey("telegram", "123456", "-100900")
DM = ThreadKey("telegram", "123456", "42")
SHORT = dataclasses.replace(FAST, max_retry_wait=0.5)  # less than a 1 s retry_after


def _sends(fake: FakeTelegram) -> list[tuple[int, object, object]]:
    return [
        (c.status, c.params.get("reply_parameters"), c.params.get("message_thread_id"))
        for c in fake.calls
        if c.method == "sendMessage"
    ]


async def test_answer_to_a_question_deleted_in_a_topic_is_sent_without_the_reply(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    # Telegram ignores allow_sending_without_reply in forum topics: the reply to
    # a deleted question is refused, and the answer is sent again as a plain
    # message in the same topic.
    fake.set_chat(FORUM, "supergroup", is_forum=True)
    fake.forget(FORUM, 10)
    question = MessageRef("telegram", str(FORUM), "10", "55")
    ref = await channel.outbox().send(TOPIC, OutboundMessage("the answer"), reply_to=question)
    (refused, _, topic1), (ok, reply, topic2) = _sends(fake)
    assert (refused, ok, reply) == (400, 200, None)
    assert topic1 == topic2 == "55"
    shown = fake.message(FORUM, int(ref.message_id))
    assert shown.text == "the answer" and shown.message_thread_id == 55


async def test_answer_to_a_deleted_question_outside_topics_needs_no_second_call(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    fake.set_chat(-100900, "supergroup")
    fake.forget(-100900, 10)
    question = MessageRef("telegram", "-100900", "10")
    await channel.outbox().send(GROUP, OutboundMessage("the answer"), reply_to=question)
    assert [s for s, _, _ in _sends(fake)] == [200]  # allow_sending_without_reply applies


async def test_other_refusals_of_a_reply_still_fail(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    fake.fail_next("sendMessage", 400, "Bad Request: chat not found")
    question = MessageRef("telegram", "42", "10")
    with pytest.raises(SendFailed):
        await channel.outbox().send(DM, OutboundMessage("x"), reply_to=question)
    assert len(_sends(fake)) == 1


async def test_flood_wait_longer_than_max_retry_wait_delivers_the_answer(
    fake: FakeTelegram, redis: Redis
) -> None:
    # The chat is paused for retry_after whatever happens (anything sent there
    # waits that long): giving the answer up would only swap it for a failure
    # notice sent after the same wait.
    ch = await make_channel(fake, redis, limits=SHORT)
    try:
        fake.fail_next("sendMessage", 429, retry_after=1)
        t0 = time.monotonic()
        ref = await ch.outbox().send(DM, OutboundMessage("the answer"))
        assert time.monotonic() - t0 >= 0.95
        assert fake.message(42, int(ref.message_id)).text == "the answer"
        assert [s for s, _, _ in _sends(fake)] == [429, 200]
    finally:
        await ch.shutdown()


async def test_flood_control_that_keeps_refusing_gives_up(fake: FakeTelegram, redis: Redis) -> None:
    # A send already held back max_retry_wait that is refused again gives up.
    ch = await make_channel(fake, redis, limits=SHORT)
    try:
        fake.fail_next("sendMessage", 429, retry_after=1, count=2)
        with pytest.raises(SendRateLimited):
            await ch.outbox().send(DM, OutboundMessage("the answer"))
        assert [s for s, _, _ in _sends(fake)] == [429, 429]
    finally:
        await ch.shutdown()
