"""Discord payloads -> InboundEvent (pure).

``parse_message`` takes a MESSAGE_CREATE payload (gateway) or a message from
``GET /channels/{id}/messages`` (catch-up; these lack ``guild_id``, which the
context supplies) and decides whether Parley is addressed:

* a DM                                   -> thread = the DM channel
* a guild message that mentions the bot or replies to it (or any message
  when ``group_reply == "all"``)         -> thread = the channel
* any message inside a Discord thread the bot started or was mentioned in
                                         -> thread = that Discord thread

``ThreadKey("discord", guild id or "dm", channel id, thread id or "")``: for a
message in a Discord thread the conversation is the parent channel.

A mention is ``<@bot>`` / ``<@!bot>`` or ``<@&role>`` of the bot's own managed
role (the one Discord offers next to the bot when someone types ``@Parley``);
both are removed from the text.  A forwarded message (``message_reference.type``
1) has empty ``content``: its text and attachments are read from
``message_snapshots`` (an embed-only one, e.g. a bot's message: its embeds'
titles and descriptions).  Stickers and polls are passed on in words
(``[sticker: Wave]``, ``[poll: question / option, option]``); in a server, one
without text only when addressed to the bot.  A message that was only the bot's
mention becomes :data:`BARE_MENTION_TEXT`.

``parse_command`` takes a slash command (INTERACTION_CREATE type 2) and makes
the event a message ``/<name> <text option>`` addressed to the bot in that
channel would make (same thread key; a Discord thread's parent comes from the
interaction's ``channel`` object).  ``parse_press`` takes a button press.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from agent_core.events import (
    Action,
    Attachment,
    EventKind,
    InboundEvent,
    MessageRef,
    ThreadKey,
)
from channels.mentions import BARE_MENTION_TEXT, cut_mentions

from .render import encode_extra

CHANNEL = "discord"
DM_TENANT = "dm"
# What the agent sees when a message only mentions the bot ("@Parley" alone).
FORWARD = 1  # message_reference.type of a forwarded message (0: a reply)

# message types a person writes: DEFAULT, REPLY, CHAT_INPUT_COMMAND excluded, THREAD_STARTER excluded
_USER_MESSAGE_TYPES = {0, 19}
APPLICATION_COMMAND = 2  # INTERACTION_CREATE type of a slash command
COMMAND_TEXT_OPTION = "text"  # the one (optional, string) option of a command with arguments
# channel types of Discord threads: announcement, public, private
THREAD_CHANNEL_TYPES = frozenset({10, 11, 12})


class RawUser(TypedDict):
    id: str
    username: NotRequired[str]
    global_name: NotRequired[str | None]
    bot: NotRequired[bool]


class RawAttachment(TypedDict):
    id: str
    filename: str
    url: NotRequired[str]
    content_type: NotRequired[str]
    size: NotRequired[int]


class RawMessage(TypedDict):
    id: str
    channel_id: str
    author: RawUser
    content: NotRequired[str]
    guild_id: NotRequired[str]
    type: NotRequired[int]
    mentions: NotRequired[list[RawUser]]
    mention_everyone: NotRequired[bool]
    attachments: NotRequired[list[RawAttachment]]
    referenced_message: NotRequired[dict[str, Any] | None]
    webhook_id: NotRequired[str]
    mention_roles: NotRequired[list[str]]
    message_reference: NotRequired[dict[str, Any]]
    message_snapshots: NotRequired[list[dict[str, Any]]]
    sticker_items: NotRequired[list[dict[str, Any]]]
    poll: NotRequired[dict[str, Any]]
    embeds: NotRequired[list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class MessageContext:
    """What the gateway knows beyond the payload."""

    bot_id: str
    group_reply: str = "mention"  # mention | all
    guild_id: str = ""  # fallback when the payload has none (REST catch-up)
    thread_parent: str = ""  # the channel is a Discord thread under this parent
    thread_active: bool = False  # ... which the bot started or was mentioned in
    bot_roles: frozenset[str] = frozenset()  # the bot's managed role(s) in this guild


def display_name(user: RawUser | dict[str, Any], member: Any = None) -> str:
    """The name Discord shows for ``user``: the server nickname (from ``member``, or
    the ``member`` a mention carries), else the global display name, else the username."""
    m = member if isinstance(member, dict) else user.get("member")
    nick = m.get("nick") if isinstance(m, dict) else None
    return str(nick or user.get("global_name") or user.get("username") or "")


def _mention_re(bot_id: str, roles: frozenset[str] = frozenset()) -> re.Pattern[str]:
    alts = [rf"@!?{re.escape(bot_id)}", *(rf"@&{re.escape(r)}" for r in sorted(roles))]
    return re.compile(rf"<(?:{'|'.join(alts)})>")


_USER_MENTION = re.compile(r"<@!?(\d+)>")


def _named_mentions(text: str, mentioned: list[RawUser]) -> str:
    """``<@123>`` of the people a message mentions -> ``@name``, from the message's own
    ``mentions`` (no lookup); a mention the message does not describe stays as it is."""
    names = {str(u.get("id")): display_name(u) for u in mentioned if isinstance(u, dict)}

    def named(m: re.Match[str]) -> str:
        name = names.get(m.group(1))
        return f"@{name}" if name else m.group(0)

    return _USER_MENTION.sub(named, text) if "<@" in text else text


def mentions_bot(raw: RawMessage, bot_id: str, roles: frozenset[str] = frozenset()) -> bool:
    if any(u.get("id") == bot_id for u in raw.get("mentions") or ()):
        return True
    if roles and any(str(r) in roles for r in raw.get("mention_roles") or ()):
        return True
    return bool(_mention_re(bot_id, roles).search(raw.get("content") or ""))


def replies_to_bot(raw: RawMessage, bot_id: str) -> bool:
    ref = raw.get("referenced_message")
    return bool(ref) and str((ref or {}).get("author", {}).get("id", "")) == bot_id


def attachment_kind(mime: str) -> str:
    major = mime.split("/", 1)[0]
    if major in ("image", "audio", "video"):
        return major
    return "document" if mime else "other"


def _attachments(items: Any) -> list[Attachment]:
    return [
        Attachment(
            kind=attachment_kind(a.get("content_type", "")),
            name=a.get("filename", ""),
            mime=a.get("content_type", ""),
            size=int(a.get("size", 0) or 0),
            ref=a.get("url", ""),
        )
        for a in (items if isinstance(items, list) else ())
        if isinstance(a, dict)
    ]


def _shared(msg: dict[str, Any] | RawMessage) -> list[str]:
    """What a message carries besides text and files, in words: its stickers
    (``[sticker: Wave]``) and its poll (``[poll: question / option, option]``)."""
    out: list[str] = []
    stickers = msg.get("sticker_items")
    for item in stickers if isinstance(stickers, list) else ():
        name = str(item.get("name") or "").strip() if isinstance(item, dict) else ""
        out.append(f"[sticker: {name}]" if name else "[sticker]")
    poll = msg.get("poll")
    if isinstance(poll, dict):
        question = poll.get("question")
        asked = str(question.get("text") or "").strip() if isinstance(question, dict) else ""
        options = []
        answers = poll.get("answers")
        for answer in answers if isinstance(answers, list) else ():
            media = answer.get("poll_media") if isinstance(answer, dict) else None
            if isinstance(media, dict):
                emoji = media.get("emoji")
                label = str(media.get("text") or "").strip()
                if not label and isinstance(emoji, dict):
                    label = str(emoji.get("name") or "").strip()
                if label:
                    options.append(label)
        out.append(f"[poll: {asked or '(no question)'} / {', '.join(options)}]")
    return out


def _embeds_text(msg: dict[str, Any]) -> str:
    """The title and description of a message's embeds (what a forwarded bot
    message, an announcement or a link card shows), one per line."""
    lines: list[str] = []
    embeds = msg.get("embeds")
    for embed in embeds if isinstance(embeds, list) else ():
        if not isinstance(embed, dict):
            continue
        for key in ("title", "description"):
            value = str(embed.get(key) or "").strip()
            if value:
                lines.append(value)
    return "\n".join(lines)


def _forwarded(raw: RawMessage) -> tuple[list[str], list[Attachment]]:
    """The forwarded message(s) of ``raw``: (quoted texts, attachments)."""
    ref = raw.get("message_reference")
    if not isinstance(ref, dict) or ref.get("type") != FORWARD:
        return [], []
    quotes: list[str] = []
    files: list[Attachment] = []
    snapshots = raw.get("message_snapshots")
    for snap in snapshots if isinstance(snapshots, list) else ():
        inner = snap.get("message") if isinstance(snap, dict) else None
        if not isinstance(inner, dict):
            continue
        files.extend(_attachments(inner.get("attachments")))
        # embed-only (a bot's or an announcement's message): its embeds' text
        body = str(inner.get("content") or "").strip() or _embeds_text(inner)
        body = "\n".join([body, *_shared(inner)] if body else _shared(inner))
        if body:
            quoted = "\n".join("> " + line for line in body.split("\n"))
            quotes.append("Forwarded message:\n" + quoted)
    return quotes, files


def addressed_in_server(raw: RawMessage, ctx: MessageContext) -> bool:
    """``raw`` is a person's message in a server that mentions the bot or replies to
    one of its messages.  Without the Message Content intent, such a message that
    :func:`parse_message` found empty is a reply sent with Discord's "@" toggle off:
    Discord left its text out (it does so for any message that does not mention
    the bot), so it cannot be answered."""
    author = raw.get("author") or {}
    if author.get("bot") or raw.get("webhook_id") or not author.get("id"):
        return False
    if raw.get("type", 0) not in _USER_MESSAGE_TYPES or author["id"] == ctx.bot_id:
        return False
    if not (raw.get("guild_id") or ctx.guild_id):
        return False
    return mentions_bot(raw, ctx.bot_id, ctx.bot_roles) or replies_to_bot(raw, ctx.bot_id)


def parse_message(raw: RawMessage, ctx: MessageContext) -> InboundEvent | None:
    """The event for ``raw``, or None when Parley is not addressed / must ignore it."""
    author = raw.get("author") or {}
    if author.get("bot") or raw.get("webhook_id") or not author.get("id"):
        return None
    if raw.get("type", 0) not in _USER_MESSAGE_TYPES:
        return None
    if author["id"] == ctx.bot_id:
        return None
    guild_id = raw.get("guild_id") or ctx.guild_id
    channel_id = raw["channel_id"]
    is_dm = not guild_id
    addressed = mentions_bot(raw, ctx.bot_id, ctx.bot_roles) or replies_to_bot(raw, ctx.bot_id)
    in_thread = bool(ctx.thread_parent)
    followed = in_thread and ctx.thread_active
    if not is_dm and not addressed and not followed and ctx.group_reply != "all":
        return None
    content = raw.get("content") or ""
    text = cut_mentions(_mention_re(ctx.bot_id, ctx.bot_roles), content).strip()
    text = _named_mentions(text, raw.get("mentions") or [])
    quotes, forwarded = _forwarded(raw)
    shared = _shared(raw)
    attachments = tuple(_attachments(raw.get("attachments")) + forwarded)
    if shared and not (text or quotes or attachments) and not (is_dm or addressed or followed):
        return None  # a sticker or poll among people: not for the bot (GROUP_REPLY=all too)
    text = "\n".join([text, *shared] if text else shared)
    text = "\n\n".join([text, *quotes] if text else quotes)
    if not text and not attachments:
        if not content.strip():
            return None  # nothing readable (no Message Content intent, a sticker, ...)
        text = BARE_MENTION_TEXT  # "@Parley" alone: answered, like a greeting
    if in_thread:
        conversation, thread = ctx.thread_parent, channel_id
    else:
        conversation, thread = channel_id, ""
    key = ThreadKey(CHANNEL, guild_id or DM_TENANT, conversation, thread)
    return InboundEvent(
        event_id=raw["id"],
        kind=EventKind.MESSAGE,
        channel=CHANNEL,
        thread=key,
        user_id=author["id"],
        user_name=display_name(author, raw.get("member")),
        text=text,
        is_direct=is_dm,
        mentions_bot=addressed,
        attachments=attachments,
        reply_ref=MessageRef(CHANNEL, conversation, raw["id"], thread),
        received_at=time.time(),
    )


@dataclass(frozen=True, slots=True)
class Press:
    """A component interaction, in the fields Parley needs (from INTERACTION_CREATE)."""

    interaction_id: str
    application_id: str
    token: str
    payload: str  # the Button.payload carried in custom_id
    user_id: str
    user_name: str
    channel_id: str  # where the message with the button lives
    message_id: str
    guild_id: str = ""
    thread_parent: str = ""  # channel_id is a Discord thread under this parent


def parse_press(press: Press) -> InboundEvent:
    if press.thread_parent:
        conversation, thread = press.thread_parent, press.channel_id
    else:
        conversation, thread = press.channel_id, ""
    key = ThreadKey(CHANNEL, press.guild_id or DM_TENANT, conversation, thread)
    return InboundEvent(
        event_id=press.interaction_id,
        kind=EventKind.ACTION,
        channel=CHANNEL,
        thread=key,
        user_id=press.user_id,
        user_name=press.user_name,
        is_direct=not press.guild_id,
        action=Action(token=press.payload),
        reply_ref=MessageRef(
            CHANNEL,
            conversation,
            press.message_id,
            thread,
            extra=encode_extra(interaction=(press.application_id, press.token)),
        ),
        received_at=time.time(),
    )


class RawInteraction(TypedDict):
    """INTERACTION_CREATE, in the fields Parley reads (a slash command)."""

    id: str
    application_id: str
    type: int
    token: str
    data: NotRequired[dict[str, Any]]
    channel_id: NotRequired[str]
    channel: NotRequired[dict[str, Any]]
    guild_id: NotRequired[str]
    member: NotRequired[dict[str, Any]]  # in a server: the user is member.user
    user: NotRequired[RawUser]  # in a DM
    context: NotRequired[int]  # 0 server, 1 the bot's DM, 2 another private channel
    app_permissions: NotRequired[str]  # the bot's permissions where it was used


def interaction_user(raw: RawInteraction) -> dict[str, Any]:
    member = raw.get("member") or {}
    user = member.get("user") or raw.get("user") or {}
    return dict(user)


def interaction_thread_parent(raw: RawInteraction) -> str:
    """The parent channel when the interaction comes from a Discord thread, else ""."""
    channel = raw.get("channel") or {}
    if channel.get("type") in THREAD_CHANNEL_TYPES:
        return str(channel.get("parent_id") or "")
    return ""


def command_text(data: dict[str, Any]) -> str:
    """``/<name>`` or ``/<name> <text option>``."""
    text = ""
    for option in data.get("options") or ():
        if isinstance(option, dict) and option.get("name") == COMMAND_TEXT_OPTION:
            text = str(option.get("value") or "").strip()
    name = str(data.get("name") or "")
    return f"/{name} {text}" if text else f"/{name}"


def parse_command(raw: RawInteraction, *, thread_parent: str = "") -> InboundEvent | None:
    """The event of a slash command: what a message with its text, addressed to the
    bot in the same channel, would be (``thread_parent``: the channel is a Discord
    thread under it).  None when the payload lacks a user, channel or name."""
    user = interaction_user(raw)
    data = raw.get("data") or {}
    channel_id = str(raw.get("channel_id") or "")
    if not user.get("id") or not channel_id or not data.get("name"):
        return None
    guild_id = str(raw.get("guild_id") or "")
    if thread_parent and guild_id:
        conversation, thread = thread_parent, channel_id
    else:
        conversation, thread = channel_id, ""
    return InboundEvent(
        event_id=raw["id"],
        kind=EventKind.COMMAND,
        channel=CHANNEL,
        thread=ThreadKey(CHANNEL, guild_id or DM_TENANT, conversation, thread),
        user_id=str(user["id"]),
        user_name=display_name(user, raw.get("member")),
        text=command_text(data),
        is_direct=not guild_id,
        mentions_bot=True,
        # no message to reply to: the answer is a new message under the echo; the
        # interaction (answered by then) carries a notice only its invoker may see
        reply_ref=MessageRef(
            CHANNEL,
            conversation,
            "",
            thread,
            encode_extra(
                interaction=(str(raw.get("application_id") or ""), str(raw.get("token") or "")),
                invoker=str(user["id"]),
            )
            if raw.get("application_id") and raw.get("token")
            else "",
        ),
        received_at=time.time(),
    )
