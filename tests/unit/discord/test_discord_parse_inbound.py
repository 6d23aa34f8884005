"""Discord payloads -> InboundEvent: forwards, the bot's managed role, bare mentions."""

from __future__ import annotations

from typing import Any

from channels.discord.parse import BARE_MENTION_TEXT, MessageContext, parse_message
from tests.unit.discord.test_discord_parse import msg

BOT = "100"
ROLE = "150"
CTX = MessageContext(bot_id=BOT)
GUILD = MessageContext(bot_id=BOT, bot_roles=frozenset({ROLE}))


def forward(content: str, attachments: list[dict[str, Any]] | None = None, **kw: Any) -> Any:
    return msg(
        content="",
        message_reference={"type": 1, "channel_id": "777", "message_id": "555"},
        message_snapshots=[
            {
                "message": {
                    "content": content,
                    "attachments": attachments or [],
                    "type": 0,
                    "timestamp": "2024-01-01T00:00:00+00:00",
                }
            }
        ],
        **kw,
    )


def test_forwarded_message_in_dm_reaches_the_agent() -> None:
    """A forwarded message (message_reference.type 1) has empty ``content``; its
    text is in message_snapshots and reaches the agent as a quote."""
    ev = parse_message(forward("Deploy failed: exit code 137\non web-2"), CTX)
    assert ev is not None
    assert ev.text == "Forwarded message:\n> Deploy failed: exit code 137\n> on web-2"


def test_forwarded_attachments_reach_the_agent() -> None:
    shot = {"id": "1", "filename": "oom.png", "content_type": "image/png", "size": 9, "url": "u"}
    ev = parse_message(forward("", [shot]), CTX)
    assert ev is not None and ev.text == ""
    [att] = ev.attachments
    assert (att.kind, att.name, att.ref) == ("image", "oom.png", "u")


def test_a_reply_is_not_a_forward() -> None:
    raw = forward("not forwarded")
    raw["message_reference"]["type"] = 0
    assert parse_message(raw, CTX) is None


def test_forward_in_a_server_channel_still_needs_group_reply_all() -> None:
    assert parse_message(forward("x", guild_id="200"), CTX) is None
    ev = parse_message(forward("x", guild_id="200"), MessageContext(bot_id=BOT, group_reply="all"))
    assert ev is not None and ev.text == "Forwarded message:\n> x"


def test_mention_through_the_bots_managed_role() -> None:
    """'@Parley' picked as the bot's integration role sends <@&ROLE>: a mention of
    the bot, removed from the text."""
    raw = msg(guild_id="200", content=f"<@&{ROLE}> what's the weather?", mention_roles=[ROLE])
    ev = parse_message(raw, GUILD)
    assert ev is not None and ev.mentions_bot
    assert ev.text == "what's the weather?"
    # content alone is enough (REST payloads, or mention_roles missing)
    ev = parse_message(msg(guild_id="200", content=f"hi <@&{ROLE}> there"), GUILD)
    assert ev is not None and ev.text == "hi there"


def test_other_roles_are_not_the_bot() -> None:
    raw = msg(guild_id="200", content="<@&151> standup in 5", mention_roles=["151"])
    assert parse_message(raw, GUILD) is None
    # without a known bot role, no role counts
    raw = msg(guild_id="200", content=f"<@&{ROLE}> hi", mention_roles=[ROLE])
    assert parse_message(raw, CTX) is None


def test_bare_mention_becomes_a_short_text() -> None:
    """'@Parley' alone (user or role mention) is answered, never published empty."""
    ev = parse_message(msg(content=f"<@{BOT}>"), CTX)
    assert ev is not None and ev.text == BARE_MENTION_TEXT
    ev = parse_message(msg(guild_id="200", content=f" <@&{ROLE}> ", mention_roles=[ROLE]), GUILD)
    assert ev is not None and ev.text == BARE_MENTION_TEXT


def test_mention_removal_keeps_code_indentation() -> None:
    code = f"<@{BOT}> why?\n```py\ndef f():\n    return  1\n```"
    ev = parse_message(msg(content=code), CTX)
    assert ev is not None
    assert ev.text == "why?\n```py\ndef f():\n    return  1\n```"
