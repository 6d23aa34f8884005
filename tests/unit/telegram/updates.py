"""Telegram updates for the parse tests: a bot, a user, chats and ``upd``."""

from __future__ import annotations

from typing import Any

from telegram import Update

from channels.telegram.parse import ParseContext

BOT = ParseContext(bot_id="123456", username="parley_bot")
USER = {"id": 42, "is_bot": False, "first_name": "Ada", "last_name": "L"}
PRIVATE = {"id": 42, "type": "private", "first_name": "Ada"}
GROUP = {"id": -100500, "type": "supergroup", "title": "Team"}
FORUM = {"id": -100777, "type": "supergroup", "title": "Forum", "is_forum": True}


def from_bot(text: str) -> dict[str, Any]:
    """An earlier message of the bot's in GROUP (to reply to)."""
    return {
        "message_id": 9,
        "date": 1700000000,
        "chat": GROUP,
        "from": {"id": 123456, "is_bot": True, "first_name": "Parley"},
        "text": text,
    }


def upd(msg: dict[str, Any], update_id: int = 1, key: str = "message") -> Update:
    base = {"message_id": 10, "date": 1700000000, "from": USER}
    return Update.de_json({"update_id": update_id, key: base | msg}, None)
