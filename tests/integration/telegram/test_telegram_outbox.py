"""The Outbox through the real python-telegram-bot against the fake Bot API."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_core.errors import SendForbidden
from agent_core.events import (
    Attachment,
    Button,
    ButtonStyle,
    InboundEvent,
    OutboundMessage,
    ThreadKey,
)
from agent_core.outbox import watch_skips
from channels.telegram import TelegramChannel, refs
from tests.fakes.telegram import FakeTelegram
from tests.integration.telegram.conftest import make_channel

DM = ThreadKey("telegram", "123456", "42")
GROUP = ThreadKey("telegram", "123456", "-100900")


def long_answer(paragraphs: int = 10) -> str:
    return "\n\n".join(f"**Part {i}.** " + "lorem ipsum " * 60 for i in range(paragraphs))


async def test_long_answer_is_split_in_order(fake: FakeTelegram, channel: TelegramChannel) -> None:
    text = long_answer()
    ref = await channel.outbox().send(DM, OutboundMessage(text))
    sent = fake.calls_of("sendMessage")
    assert len(sent) == 2
    texts = [c.params["text"] for c in sent]
    assert all(len(t) <= 4096 for t in texts)
    assert texts[0].startswith("Part 0.") and texts[1].startswith("Part ")
    assert "".join(texts).count("Part ") == 10
    ids = [m for m, _ in refs.decode_parts(ref.extra, ref.message_id)]
    assert len(ids) == 2 and ref.message_id == str(ids[0])
    assert [fake.message(42, m).text for m in ids] == texts
    # bold survives as an entity, not as asterisks
    assert "**" not in texts[0] and '"bold"' in sent[0].params["entities"]


async def test_formatting_rejected_is_resent_plain(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    fake.fail_next("sendMessage", 400, "Bad Request: can't parse entities: Unsupported start tag")
    ref = await channel.outbox().send(DM, OutboundMessage("The **answer** is `42`."))
    failed, ok = [c for c in fake.calls if c.method == "sendMessage"]
    assert failed.status == 400 and "entities" in failed.params
    assert ok.status == 200 and "entities" not in ok.params
    assert fake.message(42, int(ref.message_id)).text == "The answer is 42."
    # the same for an edit
    fake.fail_next("editMessageText", 400, "Bad Request: can't parse entities: x")
    await channel.outbox().edit(ref, OutboundMessage("The **answer** is `43`."))
    assert fake.message(42, int(ref.message_id)).text == "The answer is 43."
    assert fake.message(42, int(ref.message_id)).entities == []


async def test_fake_rejects_what_telegram_rejects(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    from telegram import MessageEntity
    from telegram.error import BadRequest

    bot = channel.bot
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_message(42, "Hello. World!", parse_mode="MarkdownV2")
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_message(42, "short", entities=[MessageEntity("bold", 2, 10)])
    with pytest.raises(BadRequest, match="too long"):
        await bot.send_message(42, "x" * 4097)
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    kb = InlineKeyboardMarkup([[InlineKeyboardButton("x", callback_data="y" * 65)]])
    with pytest.raises(BadRequest, match=r"(?i)button_data_invalid"):
        await bot.send_message(42, "ok", reply_markup=kb)
    await bot.send_message(42, "Hello\\. World\\!", parse_mode="MarkdownV2")


async def test_streaming_edits_are_paced_and_final_is_complete(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    out = channel.outbox()
    interval = out.limits.chat_interval
    words = [f"w{i}" for i in range(60)]
    ref = await out.send(DM, OutboundMessage(words[0], final=False))
    t0 = time.monotonic()
    for i in range(1, len(words)):  # the core streams faster than Telegram allows
        ref = await out.edit(ref, OutboundMessage(" ".join(words[: i + 1]), final=False))
        await asyncio.sleep(0.01)
    elapsed = time.monotonic() - t0
    ref = await out.edit(ref, OutboundMessage(" ".join(words) + " **done**", final=True))
    edits = fake.calls_of("editMessageText")
    assert len(edits) <= elapsed / interval + 2, "non-final edits must be skipped, not queued"
    assert len(edits) >= 2
    gaps = [b.at - a.at for a, b in itertools.pairwise(edits)]
    assert min(gaps) >= interval * 0.5  # (without pacing they would be ~0.01 s)
    final = fake.message(42, int(ref.message_id))
    assert final.text == " ".join(words) + " done"
    assert any(e["type"] == "bold" for e in final.entities)


async def test_stream_outgrowing_4096_continues_in_new_message(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    out = channel.outbox()
    ref = await out.send(DM, OutboundMessage("start", final=False))
    text = long_answer(4)
    ref = await out.edit(ref, OutboundMessage(text, final=True))
    text2 = long_answer(12)
    ref = await out.edit(ref, OutboundMessage(text2, final=True))
    ids = [m for m, _ in refs.decode_parts(ref.extra, ref.message_id)]
    assert len(ids) == 3 and ids == sorted(ids)
    shown = [fake.message(42, m).text for m in ids]
    assert "".join(shown).count("Part ") == 12
    assert len(fake.calls_of("sendMessage")) == 3
    # unchanged parts are not edited again
    before = len(fake.calls_of("editMessageText"))
    ref = await out.edit(ref, OutboundMessage(text2, final=True))
    assert len(fake.calls_of("editMessageText")) == before


async def test_429_pauses_the_chat_and_retries(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    fake.fail_next("sendMessage", 429, retry_after=1)
    t0 = time.monotonic()
    ref = await channel.outbox().send(DM, OutboundMessage("not dropped"))
    assert time.monotonic() - t0 >= 0.95
    assert fake.message(42, int(ref.message_id)).text == "not dropped"
    assert [c.status for c in fake.calls if c.method == "sendMessage"] == [429, 200]


async def test_pacing_keeps_under_the_fakes_limits(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    fake.chat_interval = (
        channel.outbox().limits.group_interval * 0.75
    )  # group: 20/min analogue (margin for a loaded box)
    fake.set_chat(-100900, "supergroup")
    await channel.outbox().send(GROUP, OutboundMessage(long_answer(10)))
    await channel.outbox().send(GROUP, OutboundMessage("and one more"))
    statuses = [c.status for c in fake.calls if c.method == "sendMessage"]
    assert statuses == [200, 200, 200]


async def test_non_final_edit_is_skipped_not_queued(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    out = channel.outbox()
    ref = await out.send(DM, OutboundMessage("draft", final=False))
    t0 = time.monotonic()
    same = await out.edit(ref, OutboundMessage("draft grows", final=False))  # slot taken
    assert time.monotonic() - t0 < out.limits.chat_interval
    assert same.extra == ref.extra and fake.calls_of("editMessageText") == []
    # a 429 on a streamed edit also skips it instead of waiting
    await asyncio.sleep(out.limits.chat_interval)
    fake.fail_next("editMessageText", 429, retry_after=5)
    t0 = time.monotonic()
    await out.edit(ref, OutboundMessage("draft grows more", final=False))
    assert time.monotonic() - t0 < 1.0


async def test_a_skipped_streamed_edit_is_reported(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    """A streamed edit skipped (no pacing slot, or a 429) returns as usual, and tells
    the core so (``agent_core.outbox.edit_skipped``): before, nothing did, the core
    took the text for shown and never edited again during a stall."""
    out = channel.outbox()
    ref = await out.send(DM, OutboundMessage("draft", final=False))
    with watch_skips() as watch:
        await out.edit(ref, OutboundMessage("draft grows", final=False))  # slot taken
    assert watch.skipped and fake.calls_of("editMessageText") == []
    await asyncio.sleep(out.limits.chat_interval)
    fake.fail_next("editMessageText", 429, retry_after=5)
    with watch_skips() as watch:
        await out.edit(ref, OutboundMessage("draft grows more", final=False))
    assert watch.skipped


async def test_approval_prompt_press_answer_and_keyboard_removal(
    webhook: FakeTelegram,
    channel: TelegramChannel,
    published,  # type: ignore[no-untyped-def]
) -> None:
    out = channel.outbox()
    buttons = (
        Button("Approve", "ap:k3y:y", ButtonStyle.PRIMARY),
        Button("Always", "ap:k3y:a"),
        Button("Deny", "ap:k3y:n", ButtonStyle.DANGER),
    )
    ref = await out.send(DM, OutboundMessage("Run `rm -rf build/`?", buttons=buttons))
    prompt = webhook.message(42, int(ref.message_id))
    assert prompt.reply_markup is not None
    [row] = prompt.reply_markup["inline_keyboard"]
    assert [(b["text"], b["callback_data"]) for b in row] == [
        ("Approve", "ap:k3y:y"),
        ("Always", "ap:k3y:a"),
        ("Deny", "ap:k3y:n"),
    ]
    press = webhook.press(42, int(ref.message_id), "ap:k3y:a", user_id=42)
    assert await webhook.deliver(press) == 200
    [event] = await published()
    assert event.action is not None and event.action.token == "ap:k3y:a"
    assert event.thread == DM and event.user_id == "42"

    await out.answer_action(event, "already decided")
    cq_id = press["callback_query"]["id"]
    assert webhook.answered[cq_id] == "already decided"
    await out.answer_action(event, "again")  # a second answer is refused; never raises

    assert event.reply_ref is not None
    await out.edit(event.reply_ref, OutboundMessage("✅ Always approved by Ada"))
    prompt = webhook.message(42, int(ref.message_id))
    assert prompt.text == "✅ Always approved by Ada"
    assert prompt.reply_markup is None


async def test_typing_refreshes_until_turn_finished(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    out = channel.outbox()
    topic = ThreadKey("telegram", "123456", "-100800", "9")
    await out.typing(topic)
    await out.typing(topic)  # idempotent: one refresher per thread
    await asyncio.sleep(out.limits.typing_interval * 3.5)
    await out.turn_finished(topic, None)
    n = len(fake.calls_of("sendChatAction"))
    assert 2 <= n <= 8
    assert all(c.params.get("message_thread_id") == "9" for c in fake.calls_of("sendChatAction"))
    await asyncio.sleep(out.limits.typing_interval * 2)
    assert len(fake.calls_of("sendChatAction")) == n


async def test_blocked_bot_is_a_clear_send_failure(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    # SendForbidden: a failed turn is not followed by a notice the chat would refuse too
    with pytest.raises(SendForbidden, match="blocked"):
        await channel.outbox().send(DM, OutboundMessage("hello?"))
    fake.fail_next("sendMessage", 400, "Bad Request: have no rights to send a message")
    with pytest.raises(SendForbidden, match="no rights"):
        await channel.outbox().send(DM, OutboundMessage("hello?"))


async def test_download_on_demand(fake: FakeTelegram, channel: TelegramChannel) -> None:
    fake.add_file("doc-1", b"%PDF-1.4 fake", "application/pdf")
    data = await channel.download(Attachment("document", "a.pdf", "application/pdf", 13, "doc-1"))
    assert data == b"%PDF-1.4 fake"


async def _pressed(
    webhook: FakeTelegram,
    out: Any,
    published: Callable[[], Awaitable[list[InboundEvent]]],
    n: int,
    payload: str = "ap:k1:y",
) -> tuple[list[dict[str, Any]], list[InboundEvent]]:
    """A prompt in the DM with one button (``payload``), pressed ``n`` times by user
    42 and delivered: the presses, and the events published for them."""
    ref = await out.send(DM, OutboundMessage("Allow?", buttons=(Button("Approve", payload),)))
    presses = [webhook.press(42, int(ref.message_id), payload, user_id=42) for _ in range(n)]
    for p in presses:
        assert await webhook.deliver(p) == 200
    return presses, await published()


def _answers_to(webhook: FakeTelegram, press: dict[str, Any]) -> list[Any]:
    """The answerCallbackQuery calls made for ``press``, in order."""
    cq = press["callback_query"]["id"]
    return [
        c
        for c in webhook.calls
        if c.method == "answerCallbackQuery" and c.params.get("callback_query_id") == cq
    ]


async def test_a_waiting_press_gets_the_note_unless_its_own_answer_comes_first(
    webhook: FakeTelegram,
    channel: TelegramChannel,
    published,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dataclasses import replace

    from channels.telegram import sender

    monkeypatch.setattr(sender, "PRESS_NOTE_AFTER", 0.2)
    out = channel.outbox()
    presses, (late, early, stale) = await _pressed(webhook, out, published, 3, "ap:x:y")
    stale = replace(stale, received_at=time.time() - 60)  # reclaimed long after a crash

    def calls(press: dict[str, Any]) -> list[str | None]:
        return [c.params.get("text") for c in _answers_to(webhook, press)]

    for ev in (late, early, stale):
        out.press_waiting(ev)
    out.press_waiting(late)  # reported twice (a repeated hand-off): one timer
    await out.answer_action(early, "")  # its own turn came in time: the note is called off
    await asyncio.sleep(0.6)
    assert calls(presses[0]) == [sender.PRESS_NOTE]
    assert calls(presses[1]) == [None]
    assert calls(presses[2]) == []  # too old for Telegram to take an answer: no note
    await out.answer_action(late, "Already decided")  # refused: answered by the note
    assert webhook.answered[presses[0]["callback_query"]["id"]] == sender.PRESS_NOTE
    await out.close()


async def test_the_outbox_says_whether_plain_group_text_reaches_parley(
    fake: FakeTelegram, redis: Redis
) -> None:
    """GROUP_REPLY=mention: a group's plain "yes" never arrives, so the approval
    prompt asks for a reply to it (agent_core.outbox, group text)."""
    for group_reply, reaches in (("mention", False), ("all", True)):
        ch = await make_channel(fake, redis, group_reply=group_reply)
        assert ch.outbox().group_text_reaches is reaches


async def test_a_rate_limited_press_answer_is_given_again_within_the_window(
    webhook: FakeTelegram,
    channel: TelegramChannel,
    published,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 429 on answerCallbackQuery (flood control also covers it) lost the press's
    answer: the spinner spun on and "already decided" never showed, although the wait
    Telegram asked for fitted in the time it takes an answer in.  The answer (and a
    waiting press's note) is given once more after the wait; one whose wait would
    end past the window is dropped (Telegram would refuse it)."""
    from dataclasses import replace

    from channels.telegram import sender

    monkeypatch.setattr(sender, "PRESS_NOTE_AFTER", 0.05)
    out = channel.outbox()
    presses, (answered, noted, late) = await _pressed(webhook, out, published, 3)

    def statuses(press: dict[str, Any]) -> list[int]:
        return [c.status for c in _answers_to(webhook, press)]

    webhook.fail_next("answerCallbackQuery", 429, retry_after=0.3)
    await out.answer_action(answered, "already decided")  # the turn goes on meanwhile
    webhook.fail_next("answerCallbackQuery", 429, retry_after=0.3)
    out.press_waiting(noted)  # its note meets flood control too
    async with asyncio.timeout(10):
        while len(webhook.answered) < 2:
            await asyncio.sleep(0.02)
    assert webhook.answered[presses[0]["callback_query"]["id"]] == "already decided"
    assert webhook.answered[presses[1]["callback_query"]["id"]] == sender.PRESS_NOTE
    assert statuses(presses[0]) == statuses(presses[1]) == [429, 200]

    # arrived long enough ago that the wait would end past the window: not retried
    late = replace(late, received_at=time.time() - sender.PRESS_ANSWER_WINDOW + 0.1)
    webhook.fail_next("answerCallbackQuery", 429, retry_after=0.3)
    await out.answer_action(late, "not yours")
    await asyncio.sleep(0.6)  # past the wait: a retry would have been made by now
    assert statuses(presses[2]) == [429]
    await out.close()


async def _until_called(webhook: FakeTelegram, method: str, n: int = 1) -> None:
    async with asyncio.timeout(10):
        while sum(c.method == method for c in webhook.calls) < n:
            await asyncio.sleep(0.01)


async def test_a_waiting_press_note_that_met_a_429_is_cancelled_by_close(
    webhook: FakeTelegram,
    channel: TelegramChannel,
    published,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The note waited out its 429 inside its own task, which it had already taken
    out of the map close() cancels: it answered after shutdown ("Task was destroyed
    but it is pending")."""
    from channels.telegram import sender

    monkeypatch.setattr(sender, "PRESS_NOTE_AFTER", 0.0)
    out = channel.outbox()
    _, (noted,) = await _pressed(webhook, out, published, 1)
    webhook.fail_next("answerCallbackQuery", 429, retry_after=3)
    out.press_waiting(noted)
    (note,) = [t for t in asyncio.all_tasks() if t.get_coro().__name__ == "_note_press"]  # type: ignore[union-attr]
    await _until_called(webhook, "answerCallbackQuery")
    await asyncio.sleep(0.1)  # the note takes the 429 and starts waiting it out
    assert not note.done()
    await out.close()
    assert note.done()


async def test_the_turns_answer_calls_off_a_note_waiting_out_a_429(
    webhook: FakeTelegram,
    channel: TelegramChannel,
    published,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A note refused with a 429 could no longer be called off by its turn's answer:
    with that answer rate limited too, the note's retry (whose wait began first) won
    and "already decided" was never shown."""
    from channels.telegram import sender

    monkeypatch.setattr(sender, "PRESS_NOTE_AFTER", 0.0)
    out = channel.outbox()
    (press,), (noted,) = await _pressed(webhook, out, published, 1)
    cq = press["callback_query"]["id"]
    webhook.fail_next("answerCallbackQuery", 429, retry_after=0.3)
    out.press_waiting(noted)
    await _until_called(webhook, "answerCallbackQuery")
    webhook.fail_next("answerCallbackQuery", 429, retry_after=0.3)
    await out.answer_action(noted, "already decided")
    async with asyncio.timeout(10):
        while cq not in webhook.answered:
            await asyncio.sleep(0.02)
    assert webhook.answered[cq] == "already decided"
    await out.close()
    texts = [(c.status, c.params.get("text")) for c in _answers_to(webhook, press)]
    assert texts == [(429, sender.PRESS_NOTE), (429, "already decided"), (200, "already decided")]
