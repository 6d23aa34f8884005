"""Telegram's entity limits and the plain-text fallback, against the fake Bot API;
a streamed answer that grew into two messages, run again."""

from __future__ import annotations

import pytest

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from channels.telegram import TelegramChannel
from tests.fakes.telegram import FakeTelegram
from tests.fakes.telegram_checks import entities_telegram_keeps

DM = ThreadKey("telegram", "123456", "42")


def long_answer(paragraphs: int) -> str:
    return "\n\n".join(f"**Part {i}.** " + "lorem ipsum " * 60 for i in range(paragraphs))


# -- entities that can't nest -------------------------------------------------------------


def test_the_fake_keeps_what_telegram_keeps_of_entities_that_cant_nest() -> None:
    """Code and pre contain nothing and are part of nothing but a quote; links and
    mentions can't contain each other (Bot API, "Formatting options").  Telegram
    does not refuse such entities: tdlib's fix_entities keeps the first in its order
    (offset, longer first, pre < code < text_link) and drops the rest, and keeps
    bold, italic... only outside code.  The fake stores what the chat then shows."""
    link = {"type": "text_link", "offset": 5, "length": 9, "url": "https://a.example/c"}
    code = {"type": "code", "offset": 5, "length": 9}
    assert entities_telegram_keeps([link, code]) == [code]  # the link is lost
    outer = {"type": "text_link", "offset": 0, "length": 20, "url": "https://a.example"}
    assert entities_telegram_keeps([code, outer]) == [outer]
    bold = {"type": "bold", "offset": 0, "length": 20}
    assert entities_telegram_keeps([bold, code]) == [
        {"type": "bold", "offset": 0, "length": 5},
        {"type": "bold", "offset": 14, "length": 6},
        code,
    ]
    quote = {"type": "blockquote", "offset": 0, "length": 20}
    fine = [quote, code, {**bold, "offset": 15, "length": 5}, {**link, "offset": 15, "length": 3}]
    assert entities_telegram_keeps(fine) == fine  # nested as the rules allow: all kept


async def test_a_link_with_a_code_label_reaches_the_chat_as_a_link(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    url = "https://github.com/acme/app/blob/main/config.py"
    ref = await channel.outbox().send(DM, OutboundMessage(f"Open [`config.py`]({url}) first"))
    stored = fake.message(42, int(ref.message_id))
    assert stored.text == "Open config.py first"
    assert [(e["type"], e.get("url")) for e in stored.entities] == [("text_link", url)]


# -- the plain-text fallback ----------------------------------------------------------


async def test_entities_too_long_is_resent_plain_not_dropped(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    """Telegram caps the total size of a message's entities (long text_link URLs
    count): it answers 400 'ENTITIES_TOO_LONG' (tdlib/telegram-bot-api#165).
    That is a formatting refusal: the part is resent plain, links as text."""
    fake.fail_next("sendMessage", 400, "Bad Request: ENTITIES_TOO_LONG")
    md = "Sources: " + ", ".join(f"[s{i}](https://example.com/{'x' * 300}/{i})" for i in range(5))
    ref = await channel.outbox().send(DM, OutboundMessage(md))
    shown = fake.message(42, int(ref.message_id)).text
    assert shown.startswith("Sources: s0 (https://example.com/"), shown
    assert all(f"{'x' * 300}/{i})" in shown for i in range(5)), shown


async def test_plain_fallback_keeps_link_targets(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    """When Telegram refuses the entities, the part is resent without them; each
    link's address is written after its text so it can still be followed."""
    fake.fail_next("sendMessage", 400, "Bad Request: can't parse entities: x")
    md = "Read [the migration guide](https://example.com/migrate) first."
    ref = await channel.outbox().send(DM, OutboundMessage(md))
    stored = fake.message(42, int(ref.message_id))
    assert stored.entities == []  # the fallback was taken
    assert "https://example.com/migrate" in stored.text, stored.text


# -- streamed multi-message answers on a rerun ---------------------------------------------


async def test_rerun_of_streamed_long_answer_does_not_duplicate_second_message(
    fake: FakeTelegram, channel: TelegramChannel, redis_clients: RedisClients
) -> None:
    """When a streamed answer outgrows 4096 the edit adds a message; its ref is
    recorded again, so a rerun (crash, lock lost) converges on both messages
    instead of sending the second one again."""
    out = channel.outbox()
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    text = long_answer(10)  # two Telegram messages

    first = ReplyWriter(out, delivery, DM, "e1", {}, LockGuard()).stream()
    await first.feed("**Part 0.** lorem")
    await first.finish(text)
    assert len(fake.messages) == 2

    # The worker died before completing the turn; it runs again on the same event.
    recorded = await delivery.sent_ref(DM, "e1:0")
    assert isinstance(recorded, MessageRef)
    rerun = ReplyWriter(out, delivery, DM, "e1", {"e1:0": recorded}, LockGuard()).stream()
    await rerun.feed("**Part 0.** lorem")
    ref = await rerun.finish(text)
    assert ref is not None
    shown = sorted(m.text[:8] for m in fake.messages.values() if m.chat_id == 42)
    assert len(fake.messages) == 2, shown


# -- the fake Bot API is more lenient than Telegram --------------------------------------


async def test_fake_applies_at_most_100_entities(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    """Real Telegram keeps at most 100 entities per message (the rest are ignored)."""
    from telegram import MessageEntity

    text = " ".join(f"w{i:03d}" for i in range(150))
    ents = [MessageEntity("bold", i * 5, 4) for i in range(150)]
    msg = await channel.bot.send_message(42, text, entities=ents)
    assert len(fake.message(42, msg.message_id).entities) <= 100


async def test_fake_rejects_oversized_entities(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    """Real Telegram refuses a message whose entities are too large in total
    (~9500 bytes incl. URLs: 'ENTITIES_TOO_LONG')."""
    from telegram import MessageEntity
    from telegram.error import BadRequest

    text = " ".join(f"link{i:02d}" for i in range(60))
    ents = [
        MessageEntity("text_link", i * 7, 6, url=f"https://example.com/{'y' * 1000}/{i}")
        for i in range(60)
    ]
    with pytest.raises(BadRequest):
        await channel.bot.send_message(42, text, entities=ents)


async def test_streamed_edits_record_the_part_again_only_when_it_grows(
    fake: FakeTelegram, channel: TelegramChannel, redis_clients: RedisClients
) -> None:
    """An edit that only changes what a message shows costs no Redis round trip; one
    that adds a message (past 4096) records the part again."""
    out = channel.outbox()
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    recorded: list[str] = []
    real = delivery.record_sent

    async def spy(thread: ThreadKey, field: str, ref: MessageRef) -> None:
        recorded.append(field)
        await real(thread, field, ref)

    delivery.record_sent = spy  # type: ignore[method-assign]
    reply = ReplyWriter(out, delivery, DM, "e2", {}, LockGuard()).stream()
    await reply.feed("**Part 0.** lorem")
    for i in range(3):  # short edits: same single message
        await reply.w.edit(reply.ref, OutboundMessage(f"**Part 0.** lorem {i}", final=False))  # type: ignore[arg-type]
    assert recorded == ["e2:0"]
    await reply.finish(long_answer(10))  # now two messages
    assert recorded == ["e2:0", "e2:0"]
