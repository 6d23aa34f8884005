"""Update -> InboundEvent: whether a group command is addressed to Parley
(``mentions_bot``), and commands naming a bot before getMe has answered."""

from __future__ import annotations

from typing import Any

from agent_core.events import EventKind
from channels.telegram.parse import ParseContext, parse_update
from tests.unit.telegram.updates import BOT, GROUP, PRIVATE, from_bot, upd

FROM_BOT = from_bot("earlier answer")


def entity(text: str) -> list[dict[str, Any]]:
    return [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}]


def test_a_bare_group_command_is_passed_on_but_not_addressed() -> None:
    """'/weather London' in a group may be another bot's command: it reaches the
    agent (Parley's own commands work without @), marked as not addressed, so an
    unknown one is not answered."""
    for msg in (
        {"chat": GROUP, "text": "/weather London"},
        {"chat": GROUP, "text": "/weather London", "entities": entity("/weather London")},
    ):
        e = parse_update(upd(msg), BOT)
        assert e is not None and e.kind == EventKind.COMMAND and e.text == "/weather London"
        assert (e.is_direct, e.mentions_bot) == (False, False)


def test_a_group_command_naming_the_bot_or_replying_to_it_is_addressed() -> None:
    e = parse_update(upd({"chat": GROUP, "text": "/weather@parley_bot London"}), BOT)
    assert e is not None and e.kind == EventKind.COMMAND and e.mentions_bot
    e = parse_update(upd({"chat": GROUP, "text": "/weather", "reply_to_message": FROM_BOT}), BOT)
    assert e is not None and e.kind == EventKind.COMMAND and e.mentions_bot


def test_a_private_command_is_direct() -> None:
    e = parse_update(upd({"chat": PRIVATE, "text": "/weather London"}), BOT)
    assert e is not None and e.kind == EventKind.COMMAND and e.is_direct


def test_before_getme_answered_a_group_command_naming_a_bot_is_not_ours() -> None:
    """Telegram unreachable at start: the bot's @name is unknown, so '/new@other_bot'
    cannot be told from '/new@parley_bot' and must not reset Parley's conversation."""
    nameless = ParseContext(bot_id="123456")
    for text in ("/new@other_bot", "/new@parley_bot please"):
        assert parse_update(upd({"chat": GROUP, "text": text}), nameless) is None
        assert (
            parse_update(upd({"chat": GROUP, "text": text, "entities": entity(text)}), nameless)
            is None
        )
    e = parse_update(upd({"chat": GROUP, "text": "/new"}), nameless)  # no @: as always
    assert e is not None and e.kind == EventKind.COMMAND
    # a private chat holds no other bot: the command is this one's
    e = parse_update(upd({"chat": PRIVATE, "text": "/new@parley_bot"}), nameless)
    assert e is not None and (e.kind, e.text) == (EventKind.COMMAND, "/new")
