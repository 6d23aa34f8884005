"""Telegram's START button: "/start" (and "/start <payload>" from a t.me link) is
the first message of every new user, and gets a greeting, not "Unknown command"."""

from __future__ import annotations

from typing import Any

import pytest
from telegram import Update

from channels.telegram.parse import ParseContext, parse_update
from tests.integration.agent.conftest import FnModel, tools_then_answer

CTX = ParseContext(bot_id="123456", username="parley_test_bot")


def _private_update(text: str, update_id: int = 1) -> Update:
    return Update.de_json(
        {
            "update_id": update_id,
            "message": {
                "message_id": 1,
                "date": 1700000000,
                "chat": {"id": 42, "type": "private", "first_name": "Ada"},
                "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
                "text": text,
                "entities": [{"type": "bot_command", "offset": 0, "length": 6}],
            },
        },
        None,
    )


@pytest.mark.parametrize("text", ["/start", "/start ref_campaign42"])
async def test_start_button_is_not_answered_as_an_unknown_command(world: Any, text: str) -> None:
    """Telegram clients send /start when a user taps START in a new bot chat (and
    /start <payload> for t.me/<bot>?start=<payload> deep links).  The user's very
    first exchange must not be "Unknown command /start. Did you mean /status?"."""
    event = parse_update(_private_update(text), CTX)
    assert event is not None
    w = world(FnModel(tools_then_answer()))
    await w.start()
    await w.send(event)
    await w.settle(event.thread)
    reply = w.texts(event.thread)[-1]
    assert "Unknown command" not in reply, reply
    assert reply.startswith("Hi! I'm") and "/help" in reply, reply
