"""Update -> InboundEvent: chats, groups, topics, attachments, presses; settings."""

from __future__ import annotations

import pytest
from telegram import Update

from agent_core.errors import ConfigError
from agent_core.events import EventKind, ThreadKey
from agent_core.settings import load
from channels.telegram import refs, status
from channels.telegram.parse import ParseContext, parse_update
from channels.telegram.settings import TelegramSettings
from tests.unit.telegram.updates import BOT, FORUM, GROUP, PRIVATE, USER, upd


def test_private_message() -> None:
    e = parse_update(upd({"chat": PRIVATE, "text": "hello"}, 77), BOT)
    assert e is not None
    assert e.event_id == "123456:77"
    assert e.kind == EventKind.MESSAGE
    assert e.thread == ThreadKey("telegram", "123456", "42", "")
    assert (e.user_id, e.user_name, e.text, e.is_direct) == ("42", "Ada L", "hello", True)
    assert e.reply_ref is not None and e.reply_ref.message_id == "10"


def test_group_requires_mention_and_strips_it() -> None:
    assert parse_update(upd({"chat": GROUP, "text": "just chatting"}), BOT) is None
    e = parse_update(upd({"chat": GROUP, "text": "@Parley_Bot what time is it?"}), BOT)
    assert e is not None
    assert e.text == "what time is it?"
    assert (e.is_direct, e.mentions_bot) == (False, True)
    # other bots' mentions are not ours
    assert parse_update(upd({"chat": GROUP, "text": "@parley_bot2 hi"}), BOT) is None


def test_group_reply_to_bot_counts_as_mention() -> None:
    reply = {
        "message_id": 9,
        "date": 1700000000,
        "chat": GROUP,
        "from": {"id": 123456, "is_bot": True, "first_name": "Parley"},
        "text": "earlier answer",
    }
    e = parse_update(upd({"chat": GROUP, "text": "and then?", "reply_to_message": reply}), BOT)
    assert e is not None and e.mentions_bot


def test_group_reply_all_takes_everything() -> None:
    ctx = ParseContext(bot_id="123456", username="parley_bot", group_reply="all")
    e = parse_update(upd({"chat": GROUP, "text": "just chatting"}), ctx)
    assert e is not None and not e.mentions_bot


def test_commands_in_groups() -> None:
    e = parse_update(upd({"chat": GROUP, "text": "/status@parley_bot now"}), BOT)
    assert e is not None
    assert (e.kind, e.text) == (EventKind.COMMAND, "/status now")
    assert parse_update(upd({"chat": GROUP, "text": "/status@other_bot"}), BOT) is None


def test_forum_topic_is_the_thread() -> None:
    msg = {
        "chat": FORUM,
        "text": "@parley_bot hi",
        "message_thread_id": 55,
        "is_topic_message": True,
    }
    e = parse_update(upd(msg), BOT)
    assert e is not None
    assert e.thread == ThreadKey("telegram", "123456", "-100777", "55")
    assert e.reply_ref is not None and e.reply_ref.thread == "55"


def test_edited_messages_ignored_by_default() -> None:
    u = upd({"chat": PRIVATE, "text": "fixed typo", "edit_date": 1700000001}, key="edited_message")
    assert parse_update(u, BOT) is None
    ctx = ParseContext(bot_id="123456", username="parley_bot", edited_messages="reply")
    e = parse_update(u, ctx)
    assert e is not None and e.text == "fixed typo"


def test_attachments_are_references_not_downloads() -> None:
    photo = [
        {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 100},
        {"file_id": "big", "file_unique_id": "b", "width": 900, "height": 900, "file_size": 9000},
    ]
    e = parse_update(upd({"chat": PRIVATE, "photo": photo, "caption": "look"}), BOT)
    assert e is not None and e.text == "look"
    [a] = e.attachments
    assert (a.kind, a.ref, a.size, a.mime) == ("image", "big", 9000, "image/jpeg")

    doc = {"file_id": "d1", "file_unique_id": "d", "file_name": "r.pdf",
           "mime_type": "application/pdf", "file_size": 1234}  # fmt: skip
    voice = {"file_id": "v1", "file_unique_id": "v", "duration": 3, "mime_type": "audio/ogg"}
    e2 = parse_update(upd({"chat": PRIVATE, "document": doc}), BOT)
    e3 = parse_update(upd({"chat": PRIVATE, "voice": voice}), BOT)
    assert e2 is not None and e3 is not None
    assert (e2.attachments[0].kind, e2.attachments[0].name) == ("document", "r.pdf")
    assert (e3.attachments[0].kind, e3.attachments[0].ref) == ("audio", "v1")


def test_bots_and_service_messages_ignored() -> None:
    bot_user = {"id": 99, "is_bot": True, "first_name": "Other"}
    assert parse_update(upd({"chat": PRIVATE, "text": "hi", "from": bot_user}), BOT) is None
    assert parse_update(upd({"chat": GROUP, "new_chat_members": [USER]}), BOT) is None


def test_callback_query_is_an_action_with_its_query_id() -> None:
    data = {
        "update_id": 5,
        "callback_query": {
            "id": "cq-1",
            "from": USER,
            "chat_instance": "x",
            "data": "ap:abc123:y",
            "message": {
                "message_id": 31,
                "date": 1700000000,
                "chat": FORUM,
                "message_thread_id": 55,
                "is_topic_message": True,
                "text": "Run tool?",
            },
        },
    }
    e = parse_update(Update.de_json(data, None), BOT)
    assert e is not None
    assert e.kind == EventKind.ACTION
    assert e.action is not None and (e.action.token, e.action.decision) == ("ap:abc123:y", "")
    assert e.thread == ThreadKey("telegram", "123456", "-100777", "55")
    assert e.reply_ref is not None and e.reply_ref.message_id == "31"
    assert refs.decode_callback(e.reply_ref.extra) == "cq-1"
    # survives the trip through Redis
    assert type(e).from_json(e.to_json()) == e


def test_settings_validation_is_one_clear_line_without_the_value() -> None:
    with pytest.raises(ConfigError) as exc:
        load(TelegramSettings, telegram_bot_token="not-a-token")
    assert exc.value.problems[0].startswith("TELEGRAM_BOT_TOKEN: malformed bot token")
    assert "not-a-token" not in str(exc.value)
    with pytest.raises(ConfigError) as exc2:
        load(TelegramSettings, telegram_bot_token="1:abc", telegram_webhook_secret="bad secret!")
    assert exc2.value.problems[0].startswith("TELEGRAM_WEBHOOK_SECRET")
    ok = load(TelegramSettings, telegram_bot_token="1:abc", telegram_webhook_secret="a" * 256)
    assert ok.bot_id == "1"
    assert ok.resolved_mode("https://x") == "webhook"
    assert ok.resolved_mode("") == "polling"
    assert load(TelegramSettings, telegram_mode="polling").resolved_mode("https://x") == "polling"
    assert ok.file_url == "https://api.telegram.org/file/bot"


def test_status() -> None:
    assert status(TelegramSettings()) == (False, "TELEGRAM_BOT_TOKEN not set")
    enabled, why = status(TelegramSettings(telegram_bot_token="77:abc"))
    assert enabled and "77" in why and "abc" not in why
