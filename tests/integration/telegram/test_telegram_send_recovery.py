"""Sends that Telegram refuses at first and that still reach the user."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.errors import ChannelError, SendFailed, SendRateLimited
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.store import keys
from agent_core.store.delivery import Delivery
from channels.telegram import TelegramChannel, refs
from channels.telegram.sender import Limits
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


async def test_flood_wait_longer_than_max_retry_wait_is_left_to_the_turn(
    fake: FakeTelegram, redis: Redis
) -> None:
    # A longer wait is not slept in the sender, where neither /interrupt nor a
    # stopping worker could end it: SendRateLimited carries it to the turn's reply
    # writer (which waits it out and sends again, tests/integration/agent/
    # test_rate_limited_sends.py).  The chat stays paused for it meanwhile: a send
    # before it is over is refused at once, for what is left of the wait.
    ch = await make_channel(fake, redis, limits=SHORT)
    try:
        fake.fail_next("sendMessage", 429, retry_after=3)
        with pytest.raises(SendRateLimited) as caught:
            await ch.outbox().send(DM, OutboundMessage("the answer"))
        assert caught.value.retry_after == 3
        with pytest.raises(SendRateLimited) as again:
            await ch.outbox().send(DM, OutboundMessage("the answer"))
        assert 2 < again.value.retry_after <= 3
        assert [s for s, _, _ in _sends(fake)] == [429]
    finally:
        await ch.shutdown()


async def test_flood_wait_within_max_retry_wait_is_slept_in_the_sender(
    fake: FakeTelegram, redis: Redis
) -> None:
    ch = await make_channel(fake, redis, limits=dataclasses.replace(FAST, max_retry_wait=2.0))
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
    ch = await make_channel(fake, redis, limits=dataclasses.replace(FAST, max_retry_wait=1.0))
    try:
        fake.fail_next("sendMessage", 429, retry_after=1, count=2)
        with pytest.raises(SendRateLimited):
            await ch.outbox().send(DM, OutboundMessage("the answer"))
        assert [s for s, _, _ in _sends(fake)] == [429, 429]
    finally:
        await ch.shutdown()


def _long(paragraphs: int) -> str:
    """About five paragraphs per Telegram message."""
    return "\n\n".join(f"Part {i}. " + "lorem ipsum " * 60 for i in range(paragraphs))


def _shown(fake: FakeTelegram) -> list[str]:
    return [m.text for (c, _), m in sorted(fake.messages.items()) if c == 42]


async def test_a_timed_out_message_of_a_long_answer_is_kept_and_the_rest_sent(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    """A 504 on the 2nd of three messages (Telegram stored it): the 3rd is sent all
    the same; the 2nd is kept as a placeholder that later edits (a rerun's
    included) never send again, and the known messages around it are edited."""
    out = channel.outbox()
    ref = await out.send(DM, OutboundMessage("start", final=False))
    fake.fail_next("sendMessage", 504, "Gateway Time-out", gateway=True, after=True)
    text = _long(12)
    ref = await out.edit(ref, OutboundMessage(text))
    parts = refs.decode_parts(ref.extra, ref.message_id)
    assert [m == refs.UNKNOWN for m, _ in parts] == [False, True, False]
    assert ref.message_id == str(parts[0][0])
    assert [c.status for c in fake.calls if c.method == "sendMessage"] == [200, 504, 200]
    assert "".join(_shown(fake)).count("Part ") == 12 and len(_shown(fake)) == 3
    calls = len(fake.calls)
    assert await out.edit(ref, OutboundMessage(text)) == ref  # a rerun: nothing to do
    assert len(fake.calls) == calls
    ref = await out.edit(ref, OutboundMessage(text + " More."))  # only the last changes
    assert [c.method for c in fake.calls[calls:]] == ["editMessageText"]
    assert _shown(fake)[-1].endswith("More.") and len(_shown(fake)) == 3
    # The placeholder's own text changes: it cannot be edited, so it stays as it
    # was and the text goes on in the known messages after it (then a new one).
    ref = await out.edit(ref, OutboundMessage(text.replace("Part 6.", "Part 6 (new).")))
    ids = [m for m, _ in refs.decode_parts(ref.extra, ref.message_id)]
    assert refs.UNKNOWN not in ids and len(ids) == 3 and ids == sorted(ids)
    now = [fake.message(42, m).text for m in ids]
    assert "".join(now).count("Part ") == 12 and "Part 6 (new)." in now[1]
    assert len(_shown(fake)) == 4  # the stale one too


async def test_a_streamed_answer_starts_no_growing_continuation_message(
    fake: FakeTelegram, redis: Redis
) -> None:
    """While streaming, a message after the first is sent only once full (or by
    the final edit): were its send unconfirmed, it could not be edited."""
    unpaced = dataclasses.replace(FAST, chat_interval=0.0)  # no streamed edit skipped
    channel = await make_channel(fake, redis, limits=unpaced)
    try:
        await _stream_in_messages(fake, channel)
    finally:
        await channel.shutdown()


async def _stream_in_messages(fake: FakeTelegram, channel: TelegramChannel) -> None:
    out = channel.outbox()
    ref = await out.send(DM, OutboundMessage(_long(7), final=False))
    assert len(fake.calls_of("sendMessage")) == 1  # the growing 2nd waits
    ref = await out.edit(ref, OutboundMessage(_long(8), final=False))
    assert len(fake.calls_of("sendMessage")) == 1
    ref = await out.edit(ref, OutboundMessage(_long(12), final=False))
    assert len(fake.calls_of("sendMessage")) == 2  # the 2nd is full now; the 3rd grows
    ref = await out.edit(ref, OutboundMessage(_long(12)))
    assert len(fake.calls_of("sendMessage")) == 3
    assert "".join(_shown(fake)).count("Part ") == 12
    assert len(refs.decode_parts(ref.extra, ref.message_id)) == 3


# max_retry_wait=0: the first 429 is handed to the core (SendRateLimited), as after
# TELEGRAM_MAX_RETRY_WAIT in production
NO_WAIT = Limits(chat_interval=0.0, group_interval=0.0, global_interval=0.0, max_retry_wait=0.0)


def _para(ch: str) -> str:
    return (ch * 60 + " ") * 60  # ~3,660 chars: one Telegram message each


def _fail_nth_send(
    fake: FakeTelegram, outbox: object, monkeypatch: pytest.MonkeyPatch, nth: int, code: int
) -> None:
    """sendMessage number ``nth`` (counted from now) is refused with ``code``."""
    sends = 0
    real = outbox._api  # type: ignore[attr-defined]

    async def api(method: str, **params: Any) -> object:
        nonlocal sends
        if method == "send_message":
            sends += 1
            if sends == nth:
                if code == 429:
                    fake.fail_next("sendMessage", 429, retry_after=1)
                else:
                    fake.fail_next("sendMessage", code, "Bad Request: test refusal")
        return await real(method, **params)

    monkeypatch.setattr(outbox, "_api", api)


async def test_final_edit_refused_by_flood_control_part_way_sends_no_part_twice(
    fake: FakeTelegram, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The preview is one message, the final answer three: Telegram takes the 2nd
    and refuses the 3rd with a 429 the channel does not wait out.  The writer
    waits and makes the edit again from the messages now out (the partial ref the
    channel attached), so the 2nd is not sent twice; the part is recorded as them."""
    monkeypatch.setattr(ReplyWriter, "rate_limit_min_wait", 0.01)
    ch = await make_channel(fake, redis, limits=NO_WAIT)
    try:
        outbox = ch.outbox()
        ref = await outbox.send(DM, OutboundMessage(_para("a"), final=False))  # the preview
        delivery = Delivery(redis, redis)
        w = ReplyWriter(outbox, delivery, DM, "ev1", {"ev1:0": ref}, LockGuard())
        _fail_nth_send(fake, outbox, monkeypatch, 2, 429)
        text = "\n\n".join(_para(c) for c in "abc")
        final = await w.edit(ref, OutboundMessage(text))
        texts = fake.sent_texts(42)  # (the ones Telegram took)
        assert [t[:1] for t in texts] == ["a", "b", "c"], [t[:5] for t in texts]
        assert [c.status for c in fake.calls if c.method == "sendMessage"] == [200, 200, 429, 200]
        assert len(outbox.message_ids(final)) == 3 and w.sent["ev1:0"] == final
        assert await delivery.sent_ref(DM, "ev1:0") == final
    finally:
        await ch.shutdown()


async def test_a_streamed_edit_refused_part_way_keeps_the_messages_it_sent(
    fake: FakeTelegram, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed (droppable) edit sends two continuations and the second is
    refused: the streamed reply keeps the ref of the messages now out, so the final
    edit does not send the first continuation again."""
    ch = await make_channel(fake, redis, limits=NO_WAIT)
    try:
        outbox = ch.outbox()
        ref = await outbox.send(DM, OutboundMessage(_para("a"), final=False))  # the preview
        w = ReplyWriter(outbox, None, DM, "ev1", {}, LockGuard())  # type: ignore[arg-type]
        _fail_nth_send(fake, outbox, monkeypatch, 2, 400)
        growing = "\n\n".join(_para(c) for c in "abcd")  # b, c sent; d withheld (the tail)
        with pytest.raises(ChannelError) as failed:
            await w.edit(ref, OutboundMessage(growing, final=False), droppable=True)
        partial = failed.value.partial_ref
        assert partial is not None and len(outbox.message_ids(partial)) == 2
        await w.edit(partial, OutboundMessage(growing))
        texts = fake.sent_texts(42)
        assert [t[:1] for t in texts] == ["a", "b", "c", "d"], [t[:5] for t in texts]
    finally:
        await ch.shutdown()


async def test_a_first_send_refused_by_flood_control_part_way_is_finished_by_an_edit(
    fake: FakeTelegram, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A three-message answer sent anew: the 2nd message gets a 429.  The part is
    recorded as the 1st message, and after the wait the answer is finished by
    editing it: the 2nd and 3rd are sent, the 1st is not sent again."""
    monkeypatch.setattr(ReplyWriter, "rate_limit_min_wait", 0.01)
    ch = await make_channel(fake, redis, limits=NO_WAIT)
    try:
        outbox = ch.outbox()
        delivery = Delivery(redis, redis)
        await redis.set(keys.lock(DM), "owner-1")  # claims fenced by the thread lock
        w = ReplyWriter(outbox, delivery, DM, "ev1", {}, LockGuard(owner="owner-1"))
        _fail_nth_send(fake, outbox, monkeypatch, 2, 429)
        ref = await w.say(OutboundMessage("\n\n".join(_para(c) for c in "abc")))
        texts = fake.sent_texts(42)
        assert [t[:1] for t in texts] == ["a", "b", "c"], [t[:5] for t in texts]
        assert [c.status for c in fake.calls if c.method == "sendMessage"] == [200, 429, 200, 200]
        assert len(outbox.message_ids(ref)) == 3
        assert await delivery.sent_ref(DM, "ev1:0") == ref
    finally:
        await ch.shutdown()
