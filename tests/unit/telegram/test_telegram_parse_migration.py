"""The two service messages of a group upgraded to a supergroup -> one MOVED event."""

from __future__ import annotations

from typing import Any

from telegram import Update

from agent_core.events import EventKind, InboundEvent, ThreadKey
from channels.telegram.parse import ParseContext, parse_update

BOT = ParseContext(bot_id="123456", username="parley_bot")
ADMIN = {"id": 42, "is_bot": False, "first_name": "Ada"}
OLD = {"id": -4242, "type": "group", "title": "Team"}
NEW = {"id": -1001234567890, "type": "supergroup", "title": "Team"}


def upd(update_id: int, msg: dict[str, Any]) -> Update:
    base = {"message_id": 7, "date": 1700000000, "from": ADMIN}
    return Update.de_json({"update_id": update_id, "message": base | msg}, None)


def test_both_notices_make_the_same_moved_event() -> None:
    to = parse_update(upd(1, {"chat": OLD, "migrate_to_chat_id": NEW["id"]}), BOT)
    frm = parse_update(upd(2, {"chat": NEW, "migrate_from_chat_id": OLD["id"]}), BOT)
    assert to is not None and frm is not None
    for e in (to, frm):
        assert e.kind == EventKind.MOVED
        assert e.event_id == "123456:migrate:-4242"  # whichever comes first wins, once
        assert e.thread == ThreadKey("telegram", "123456", "-1001234567890", "")
        assert e.moved_from == ThreadKey("telegram", "123456", "-4242", "")
        assert not e.text and not e.is_direct
    assert InboundEvent.from_json(to.to_json()) == to  # it crosses processes intact


def test_an_ordinary_group_message_is_not_a_move() -> None:
    e = parse_update(upd(3, {"chat": NEW, "text": "@parley_bot hi"}), BOT)
    assert e is not None and e.kind == EventKind.MESSAGE and e.moved_from is None
