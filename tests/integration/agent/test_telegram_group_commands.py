"""A group holds other bots too: '/weather London' typed there without @ is not
answered "Unknown command" by Parley, while its own commands work without @ and an
unknown command addressed to it (a private chat, /weather@parley_test_bot, a reply
to it) still gets the hint.  Another bot's command is ignored before the access
check: no allow-list refusal and no rate-limit notice in the group for a command
never sent to Parley, nor a place in the member's rate window."""

from __future__ import annotations

from typing import Any

from telegram import Update

from agent_core.events import EventKind
from channels.telegram.parse import ParseContext, parse_update
from tests.integration.agent.conftest import FnModel, tools_then_answer, user_event

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


async def _replies(
    world: Any, chat: dict[str, Any], text: str, update_id: int, **settings: Any
) -> list[str]:
    event = parse_update(_update(chat, text, update_id), CTX)
    assert event is not None
    w = world(FnModel(tools_then_answer()), **settings)
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


async def test_another_bots_command_from_someone_off_the_allow_list_gets_no_refusal(
    world: Any,
) -> None:
    """ALLOWED_USERS set, Ada not on it: her /weather (another bot's) is not Parley's
    business; the group is not told she is not on the list."""
    allow = {"dm_policy": "allowlist", "allowed_users": "telegram:alice"}
    assert await _replies(world, GROUP, "/weather London", 5, **allow) == []
    # addressed to Parley, the refusal is said as before
    [reply] = await _replies(world, GROUP, "/weather@parley_test_bot London", 6, **allow)
    assert "allow list" in reply


async def test_other_bots_commands_do_not_use_up_the_members_rate_window(world: Any) -> None:
    """USER_RATE_LIMIT: unaddressed /weather commands are not counted, so neither a
    "too fast" notice about them nor a refusal of the member's next real request."""
    w = world(FnModel(tools_then_answer()), user_rate_limit="2/minute")
    await w.start()
    event = parse_update(_update(GROUP, "/weather London", 7), CTX)
    assert event is not None and not event.mentions_bot
    for i in range(3):
        await w.send(user_event(event.thread, "/weather London", user="42", is_direct=False,
                                kind=EventKind.COMMAND, eid=f"w{i}"))  # fmt: skip
    await w.settle(event.thread)
    assert w.texts(event.thread) == []
    for i in range(2):  # both within the window: nothing was counted before
        await w.send(user_event(event.thread, "/help", user="42", is_direct=False,
                                kind=EventKind.COMMAND, eid=f"h{i}"))  # fmt: skip
    await w.settle(event.thread)
    texts = w.texts(event.thread)
    assert len(texts) == 2 and all("/new" in t for t in texts)
    await w.stop()
