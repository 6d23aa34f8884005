"""People mentioned in a server message reach the model by the name Discord shows there."""

from __future__ import annotations

from typing import Any

from channels.discord.parse import MessageContext, parse_message

BOT = "100"


def test_mentioned_person_reaches_the_model_by_the_name_discord_shows() -> None:
    """docs/discord.md §2: other people a message mentions reach the model 'by name
    (@Bob, the name Discord shows)'.  In a server Discord shows the member's server
    nickname, which MESSAGE_CREATE carries in mentions[].member.nick."""
    raw: dict[str, Any] = {
        "id": "900",
        "channel_id": "300",
        "guild_id": "200",
        "type": 0,
        "author": {"id": "500", "username": "alice", "global_name": "Alice"},
        "content": f"<@{BOT}> ask <@600> about the deploy",
        "mentions": [
            {"id": BOT, "username": "parley", "bot": True},
            {
                "id": "600",
                "username": "rk_1987",
                "global_name": "Robert K",
                "member": {"nick": "Bob (ops on-call)", "roles": []},
            },
        ],
    }
    ev = parse_message(raw, MessageContext(bot_id=BOT))
    assert ev is not None
    assert ev.text == "ask @Bob (ops on-call) about the deploy", ev.text
    assert ev.user_name == "Alice"  # no server nickname: the global display name


def test_the_author_goes_by_their_server_nickname() -> None:
    raw: dict[str, Any] = {
        "id": "901",
        "channel_id": "300",
        "guild_id": "200",
        "type": 0,
        "author": {"id": "500", "username": "alice", "global_name": "Alice"},
        "member": {"nick": "Ali (design)", "roles": []},
        "content": f"<@{BOT}> hello",
        "mentions": [{"id": BOT, "username": "parley", "bot": True}],
    }
    ev = parse_message(raw, MessageContext(bot_id=BOT))
    assert ev is not None
    assert ev.user_name == "Ali (design)"
