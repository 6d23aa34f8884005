"""Update -> InboundEvent: stickers, locations, venues, contacts, polls and dice
have no text; in a private chat the agent gets them in words (the user got
silence), in a group only when they reply to the bot."""

from __future__ import annotations

from typing import Any

import pytest
from telegram import Update

from agent_core.events import EventKind
from channels.telegram.parse import ParseContext, parse_update
from tests.unit.telegram.updates import BOT, GROUP, PRIVATE, USER, from_bot, upd

ALL = ParseContext(bot_id="123456", username="parley_bot", group_reply="all")
FROM_BOT = from_bot("where are you?")
LOC = {"latitude": 51.500729, "longitude": -0.124625}
STICKER = {
    "file_id": "s1",
    "file_unique_id": "su1",
    "width": 512,
    "height": 512,
    "is_animated": False,
    "is_video": False,
    "type": "regular",
}
SHARED = [
    ({"sticker": STICKER | {"emoji": "😀"}}, "[sticker 😀]"),
    ({"sticker": STICKER}, "[sticker]"),
    ({"location": LOC}, "[location: 51.500729, -0.124625]"),
    (
        {
            "location": LOC,
            "venue": {"location": LOC, "title": "Big Ben", "address": "Westminster, London"},
        },
        "[venue: Big Ben, Westminster, London (51.500729, -0.124625)]",
    ),
    (
        {"contact": {"phone_number": "+44 20 7946 0000", "first_name": "Jo", "last_name": "B"}},
        "[contact: Jo B, +44 20 7946 0000]",
    ),
    (
        {
            "poll": {
                "id": "p1",
                "question": "Lunch?",
                "options": [
                    {"text": "Pizza", "voter_count": 0, "persistent_id": "o1"},
                    {"text": "Sushi", "voter_count": 0, "persistent_id": "o2"},
                ],
                "total_voter_count": 0,
                "is_closed": False,
                "is_anonymous": True,
                "type": "regular",
                "allows_multiple_answers": False,
                "allows_revoting": False,
                "members_only": False,
            }
        },
        "[poll: Lunch? (options: Pizza / Sushi)]",
    ),
    ({"dice": {"emoji": "🎲", "value": 4}}, "[dice 🎲: 4]"),
]


@pytest.mark.parametrize(("content", "text"), SHARED)
def test_in_a_private_chat_it_reaches_the_agent_in_words(
    content: dict[str, Any], text: str
) -> None:
    e = parse_update(upd({"chat": PRIVATE} | content), BOT)
    assert e is not None
    assert (e.kind, e.text, e.attachments) == (EventKind.MESSAGE, text, ())


@pytest.mark.parametrize(("content", "text"), SHARED)
def test_in_a_group_only_as_a_reply_to_the_bot(content: dict[str, Any], text: str) -> None:
    assert parse_update(upd({"chat": GROUP} | content), BOT) is None
    assert parse_update(upd({"chat": GROUP} | content), ALL) is None  # not every sticker
    e = parse_update(upd({"chat": GROUP, "reply_to_message": FROM_BOT} | content), BOT)
    assert e is not None and e.text == text and e.mentions_bot


def test_a_live_locations_updates_are_not_messages() -> None:
    edits = ParseContext(bot_id="123456", username="parley_bot", edited_messages="reply")
    moved = {"message_id": 10, "date": 1700000000, "from": USER, "chat": PRIVATE}
    moved |= {"location": LOC | {"live_period": 900}, "edit_date": 1700000060}
    assert (
        parse_update(Update.de_json({"update_id": 2, "edited_message": moved}, None), edits) is None
    )


def test_service_messages_are_still_ignored() -> None:
    joined = {"new_chat_members": [USER]}
    assert parse_update(upd({"chat": GROUP} | joined), ALL) is None
    assert parse_update(upd({"chat": PRIVATE, "text": "   "}), BOT) is None
