"""Pure parsing of Discord payloads into InboundEvent."""

from __future__ import annotations

from typing import Any

from agent_core.events import EventKind, InboundEvent, ThreadKey
from channels.discord.parse import MessageContext, Press, parse_message, parse_press
from channels.discord.render import decode_extra

BOT = "100"
CTX = MessageContext(bot_id=BOT)


def msg(**kw: Any) -> Any:
    base: dict[str, Any] = {
        "id": "900",
        "channel_id": "300",
        "author": {"id": "500", "username": "alice", "global_name": "Alice"},
        "content": "hello",
        "type": 0,
    }
    base.update(kw)
    return base


def test_dm() -> None:
    ev = parse_message(msg(), CTX)
    assert ev is not None
    assert ev.thread == ThreadKey("discord", "dm", "300", "")
    assert ev.is_direct and ev.kind is EventKind.MESSAGE
    assert (ev.event_id, ev.user_id, ev.user_name, ev.text) == ("900", "500", "Alice", "hello")
    assert ev.reply_ref is not None and ev.reply_ref.message_id == "900"
    assert InboundEvent.from_json(ev.to_json()) == ev


def test_guild_message_without_mention_is_ignored() -> None:
    assert parse_message(msg(guild_id="200"), CTX) is None


def test_guild_mention_is_stripped_and_routed() -> None:
    ev = parse_message(
        msg(guild_id="200", content=f"<@!{BOT}>  what's up", mentions=[{"id": BOT}]), CTX
    )
    assert ev is not None and ev.mentions_bot and not ev.is_direct
    assert ev.text == "what's up"
    assert ev.thread == ThreadKey("discord", "200", "300", "")


def test_people_mentioned_are_named_from_the_message_itself() -> None:
    """Discord writes mentions as <@id>; the message's own ``mentions`` name them."""
    ev = parse_message(
        msg(
            guild_id="200",
            content=f"<@{BOT}> ask <@501> and <@!502> (not <@503>, <@&77> or <#300>)",
            mentions=[
                {"id": BOT, "username": "parley"},
                {"id": "501", "username": "bob", "global_name": "Bob J"},
                {"id": "502", "username": "carol"},
            ],
        ),
        CTX,
    )
    assert ev is not None
    assert ev.text == "ask @Bob J and @carol (not <@503>, <@&77> or <#300>)"


def test_reply_to_bot_counts() -> None:
    raw = msg(guild_id="200", type=19, referenced_message={"author": {"id": BOT}})
    ev = parse_message(raw, CTX)
    assert ev is not None and ev.mentions_bot


def test_group_reply_all() -> None:
    ev = parse_message(msg(guild_id="200"), MessageContext(bot_id=BOT, group_reply="all"))
    assert ev is not None and not ev.mentions_bot


def test_bots_webhooks_self_and_system_messages_ignored() -> None:
    assert parse_message(msg(author={"id": "7", "bot": True}), CTX) is None
    assert parse_message(msg(webhook_id="5"), CTX) is None
    assert parse_message(msg(author={"id": BOT}), CTX) is None
    assert parse_message(msg(type=7), CTX) is None  # member joined
    assert parse_message(msg(content=""), CTX) is None  # nothing to read


def test_thread_messages() -> None:
    in_thread = msg(guild_id="200", channel_id="301")
    assert parse_message(in_thread, MessageContext(bot_id=BOT, thread_parent="300")) is None
    ev = parse_message(
        in_thread, MessageContext(bot_id=BOT, thread_parent="300", thread_active=True)
    )
    assert ev is not None and ev.thread == ThreadKey("discord", "200", "300", "301")
    # REST catch-up payloads have no guild_id: the context supplies it
    ev = parse_message(
        msg(channel_id="301"),
        MessageContext(bot_id=BOT, guild_id="200", thread_parent="300", thread_active=True),
    )
    assert ev is not None and ev.thread.tenant == "200" and not ev.is_direct


def test_attachment_only_message() -> None:
    raw = msg(
        content="",
        attachments=[
            {
                "id": "1",
                "filename": "a.pdf",
                "content_type": "application/pdf",
                "size": 3,
                "url": "u",
            }
        ],
    )
    ev = parse_message(raw, CTX)
    assert ev is not None and ev.attachments[0].kind == "document"


def test_press() -> None:
    ev = parse_press(
        Press(
            interaction_id="42",
            application_id="100",
            token="tok.en-_",
            payload="ap:abc:y",
            user_id="500",
            user_name="Alice",
            channel_id="301",
            message_id="77",
            guild_id="200",
            thread_parent="300",
        )
    )
    assert ev.kind is EventKind.ACTION and ev.event_id == "42"
    assert ev.action is not None and (ev.action.token, ev.action.decision) == ("ap:abc:y", "")
    assert ev.thread == ThreadKey("discord", "200", "300", "301")
    assert ev.reply_ref is not None and ev.reply_ref.message_id == "77"
    assert decode_extra(ev.reply_ref.extra)[1] == ("100", "tok.en-_")
    assert InboundEvent.from_json(ev.to_json()) == ev
