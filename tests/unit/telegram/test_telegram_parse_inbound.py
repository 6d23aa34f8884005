"""Update -> InboundEvent: senders on behalf of a chat, albums, command grammar, bare mentions."""

from __future__ import annotations

from typing import Any

from telegram import Update

from agent_core.events import EventKind
from channels.telegram.parse import BARE_MENTION_TEXT, AlbumMemory, ParseContext, parse_update

BOT = ParseContext(bot_id="123456", username="parley_bot")
USER = {"id": 42, "is_bot": False, "first_name": "Ada", "last_name": "L"}
PRIVATE = {"id": 42, "type": "private", "first_name": "Ada"}
GROUP = {"id": -100500, "type": "supergroup", "title": "Team"}
OTHER_GROUP = {"id": -100501, "type": "supergroup", "title": "Other"}
LINKED_CHANNEL = {"id": -100900, "type": "channel", "title": "Ada's channel"}
# What the Bot API puts in ``from`` for a message sent on behalf of a chat
# ("for backward compatibility ... a fake sender user in non-channel chats").
GROUP_ANONYMOUS_BOT = {
    "id": 1087968824,
    "is_bot": True,
    "first_name": "Group",
    "username": "GroupAnonymousBot",
}
CHANNEL_BOT = {"id": 136817688, "is_bot": True, "first_name": "Channel", "username": "Channel_Bot"}


def upd(msg: dict[str, Any], update_id: int = 1) -> Update:
    base = {"message_id": 10, "date": 1700000000, "from": USER}
    return Update.de_json({"update_id": update_id, "message": base | msg}, None)


# --- messages sent on behalf of a chat -------------------------------------------


def test_anonymous_group_admin_mentioning_the_bot_is_answered() -> None:
    """An anonymous admin's message (from=@GroupAnonymousBot, a bot account, and
    sender_chat=the group) is a person's message: the group is the sender."""
    u = upd(
        {
            "chat": GROUP,
            "from": GROUP_ANONYMOUS_BOT,
            "sender_chat": GROUP,
            "text": "@parley_bot summarise the pinned doc",
        }
    )
    e = parse_update(u, BOT)
    assert e is not None
    assert e.user_id == f"chat{GROUP['id']}"
    assert e.qualified_user == "telegram:chat-100500"  # what ALLOWED_USERS etc. must list
    assert e.user_name == "Team"
    assert e.text == "summarise the pinned doc"


def test_user_posting_as_their_channel_is_answered() -> None:
    """A user writing in a group as their channel (from=@Channel_Bot) is answered
    as that channel."""
    u = upd(
        {
            "chat": GROUP,
            "from": CHANNEL_BOT,
            "sender_chat": LINKED_CHANNEL,
            "text": "@parley_bot hello",
        }
    )
    e = parse_update(u, BOT)
    assert e is not None
    assert (e.user_id, e.user_name, e.text) == ("chat-100900", "Ada's channel", "hello")


def test_bots_without_sender_chat_are_still_ignored() -> None:
    other_bot = {"id": 99, "is_bot": True, "first_name": "Other", "username": "other_bot"}
    u = upd({"chat": GROUP, "from": other_bot, "text": "@parley_bot ping"})
    assert parse_update(u, BOT) is None


def test_on_behalf_of_a_chat_still_needs_the_mention_in_groups() -> None:
    u = upd({"chat": GROUP, "from": GROUP_ANONYMOUS_BOT, "sender_chat": GROUP, "text": "hi all"})
    assert parse_update(u, BOT) is None


# --- albums ----------------------------------------------------------------------


def _photo(fid: str) -> list[dict[str, Any]]:
    return [{"file_id": fid, "file_unique_id": fid + "u", "width": 800, "height": 600,
             "file_size": 50_000}]  # fmt: skip


def _album(chat: dict[str, Any], group: str = "g1", first_caption: str = "") -> list[Update]:
    items = []
    for i, fid in enumerate(("p1", "p2", "p3")):
        m: dict[str, Any] = {"chat": chat, "media_group_id": group, "photo": _photo(fid),
                             "message_id": 11 + i}  # fmt: skip
        if i == 0 and first_caption:
            m["caption"] = first_caption
        items.append(upd(m, i + 1))
    return items


def test_album_in_group_reaches_the_agent_whole() -> None:
    """An album is one update per item and only the first carries the caption (and
    the @mention): the other items of an accepted album are accepted too, so the
    agent gets every photo (as consecutive messages)."""
    ctx = ParseContext(bot_id="123456", username="parley_bot")
    events = [parse_update(u, ctx) for u in _album(GROUP, first_caption="@parley_bot compare")]
    assert all(e is not None for e in events)
    refs = sorted(a.ref for e in events if e is not None for a in e.attachments)
    assert refs == ["p1", "p2", "p3"]
    first, *rest = [e for e in events if e is not None]
    assert first.text == "compare"
    assert all(e.text == "" and e.mentions_bot for e in rest)
    assert len({e.thread for e in events if e is not None}) == 1


def test_unaddressed_album_in_group_is_ignored() -> None:
    ctx = ParseContext(bot_id="123456", username="parley_bot")
    assert [parse_update(u, ctx) for u in _album(GROUP, first_caption="holiday pics")] == [
        None,
        None,
        None,
    ]


def test_album_memory_is_per_chat_and_expires() -> None:
    now = [1000.0]
    ctx = ParseContext(
        bot_id="123456", username="parley_bot", albums=AlbumMemory(ttl=10.0, clock=lambda: now[0])
    )
    first, second, third = _album(GROUP, first_caption="@parley_bot look")
    assert parse_update(first, ctx) is not None
    # the same media_group_id in another chat is not this album
    [_, other, _] = _album(OTHER_GROUP)
    assert parse_update(other, ctx) is None
    now[0] += 9.0
    assert parse_update(second, ctx) is not None  # ... and refreshes the memory
    now[0] += 9.0
    assert parse_update(third, ctx) is not None
    now[0] += 10.5
    late = upd({"chat": GROUP, "media_group_id": "g1", "photo": _photo("p4")}, 9)
    assert parse_update(late, ctx) is None


# --- commands --------------------------------------------------------------------


def test_command_for_this_bot_followed_by_a_newline_is_not_dropped() -> None:
    """'/ask@parley_bot' then a new line: the command head ends at any whitespace."""
    e = parse_update(upd({"chat": GROUP, "text": "/ask@parley_bot\nwhat is a monad?"}), BOT)
    assert e is not None
    assert e.kind == EventKind.COMMAND
    assert e.text == "/ask\nwhat is a monad?"


def test_own_command_followed_by_newline_in_private_chat_is_answered() -> None:
    e = parse_update(upd({"chat": PRIVATE, "text": "/new@parley_bot\nlet's start over"}), BOT)
    assert e is not None and e.kind == EventKind.COMMAND
    assert e.text == "/new\nlet's start over"


def test_command_for_another_bot_followed_by_a_newline_is_ignored() -> None:
    assert parse_update(upd({"chat": GROUP, "text": "/ask@other_bot\nhi"}), BOT) is None


def test_path_at_line_start_in_a_group_is_not_taken_as_addressed_to_the_bot() -> None:
    """Text starting with '/' that is not a command (a path) is an ordinary message:
    in a group it needs a mention like any other."""
    e = parse_update(upd({"chat": GROUP, "text": "/etc/hosts is missing on web-2 again"}), BOT)
    assert e is None
    e = parse_update(upd({"chat": PRIVATE, "text": "/etc/hosts is missing"}), BOT)
    assert e is not None and e.kind == EventKind.MESSAGE
    assert e.text == "/etc/hosts is missing"


def test_bot_command_entity_at_offset_zero_makes_a_command() -> None:
    # Telegram marks commands with a bot_command entity, also where the grammar
    # alone would not see one ("/status@parley_bot." ends in a full stop).
    ent = [{"type": "bot_command", "offset": 0, "length": 18}]
    e = parse_update(upd({"chat": GROUP, "text": "/status@parley_bot.", "entities": ent}), BOT)
    assert e is not None and e.kind == EventKind.COMMAND and e.text == "/status."
    # an entity elsewhere does not make the message a command
    later = [{"type": "bot_command", "offset": 6, "length": 7}]
    assert (
        parse_update(upd({"chat": GROUP, "text": "try: /status", "entities": later}), BOT) is None
    )


def test_command_in_a_caption() -> None:
    e = parse_update(
        upd({"chat": GROUP, "photo": _photo("c1"), "caption": "/describe@parley_bot this"}), BOT
    )
    assert e is not None and e.kind == EventKind.COMMAND and e.text == "/describe this"


# --- bare mentions ---------------------------------------------------------------


def test_bare_mention_becomes_a_short_text_not_an_empty_message() -> None:
    """'@parley_bot' alone is answered (like a greeting), never published empty."""
    for chat in (PRIVATE, GROUP):
        e = parse_update(upd({"chat": chat, "text": "@parley_bot"}), BOT)
        assert e is not None and e.text == BARE_MENTION_TEXT
    e = parse_update(upd({"chat": GROUP, "photo": _photo("x"), "caption": "@parley_bot"}), BOT)
    assert e is not None and e.text == "" and len(e.attachments) == 1


def test_mention_removal_keeps_the_rest_of_the_text_as_written() -> None:
    code = "@parley_bot fix this:\n```py\ndef f():\n    return  1\n```"
    e = parse_update(upd({"chat": GROUP, "text": code}), BOT)
    assert e is not None
    assert e.text == "fix this:\n```py\ndef f():\n    return  1\n```"
    e = parse_update(upd({"chat": GROUP, "text": "thanks @parley_bot, and  you?"}), BOT)
    assert e is not None and e.text == "thanks, and  you?"
    e = parse_update(upd({"chat": GROUP, "text": "ask @parley_bot   now"}), BOT)
    assert e is not None and e.text == "ask now"
