"""A group holds other bots too: '/weather London' typed there without @ is not
answered "Unknown command" by Parley, while its own commands work without @ and an
unknown command addressed to it (a private chat, /weather@parley_test_bot, a reply
to it) still gets the hint."""

from __future__ import annotations

from typing import Any

from telegram import Update

from channels.telegram.parse import ParseContext, parse_update
from tests.integration.agent.conftest import FnModel, tools_then_answer

CTX = ParseContext(bot_id="123456", username="parley_test_bot")
GROUP = {"id": -100500, "type": "supergroup", "title": "Team"}
PRIVATE = {"id": 42, "type": "private", "first_name": "Ada"}


def _update(chat: dict[str, Any], text: str, update_id: int) -> Update:
    msg = {
        "message_id": update_id,
        "date": 1700000000,
        "chat": chat,
        "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
        "text": text,
        "entities": [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}],
    }
    return Update.de_json({"update_id": update_id, "message": msg}, None)


async def _replies(world: Any, chat: dict[str, Any], text: str, update_id: int) -> list[str]:
    event = parse_update(_update(chat, text, update_id), CTX)
    assert event is not None
    w = world(FnModel(tools_then_answer()))
    await w.start()
    await w.send(event)
    await w.settle(event.thread)
    texts: list[str] = w.texts(event.thread)
    await w.stop()
    return texts


async def test_another_bots_command_in_a_group_gets_no_notice(world: Any) -> None:
    assert await _replies(world, GROUP, "/weather London", 1) == []


async def test_parleys_own_command_in_a_group_still_works_without_at(world: Any) -> None:
    [reply] = await _replies(world, GROUP, "/help", 2)
    assert "/new" in reply


async def test_unknown_command_addressed_to_parley_gets_the_hint(world: Any) -> None:
    [reply] = await _replies(world, GROUP, "/weather@parley_test_bot London", 3)
    assert reply.startswith("Unknown command /weather.")
    [reply] = await _replies(world, PRIVATE, "/weather London", 4)
    assert reply.startswith("Unknown command /weather.")
