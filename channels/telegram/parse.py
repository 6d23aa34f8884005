"""Telegram Update -> InboundEvent (pure).

* private chat: thread = the chat;
* group / supergroup: only messages that mention the bot (``@botname``, a text
  mention, or a reply to one of the bot's messages) or commands, unless
  ``GROUP_REPLY=all``; ``@botname`` is stripped from the text.  A command is a
  ``bot_command`` entity at offset 0 or text that matches the command grammar
  (``/name`` or ``/name@bot`` followed by whitespace or the end): ``/etc/hosts``
  is not one.  A group command without ``@botname`` (nor a mention or a reply to
  the bot) has ``mentions_bot=False``: it may be another bot's, and the agent
  does not answer one it does not know;
* an album (``media_group_id``) is one update per item and only the captioned
  item carries the mention: the other items of an album whose item was
  accepted are accepted too for :data:`ALBUM_MEMORY_SECS` (remembered in the
  :class:`ParseContext`, i.e. per process);
* a message sent on behalf of a chat (``sender_chat``: an anonymous group admin,
  or a user posting as their channel) is a person's message: user id
  ``chat<chat id>``, the chat's title as the name.  Messages from bot accounts
  without ``sender_chat`` are ignored;
* a message that is only the bot's mention becomes :data:`BARE_MENTION_TEXT`;
* forum supergroup: thread = ``message_thread_id`` (replies go to the topic);
* edited messages are ignored unless ``TELEGRAM_EDITED_MESSAGES=reply``;
* photos / documents / voice / audio / video become attachments (file id, not
  downloaded);
* a sticker, location, venue, contact, poll or dice is passed on in words
  (``[location: 51.5, -0.12]``, ``[sticker 😀]``, ...): in a private chat, and in
  a group only as a reply to the bot (even with ``GROUP_REPLY=all``);
* a ``callback_query`` (inline keyboard press) is an action event whose
  ``reply_ref`` points at the pressed message and carries the callback query
  id in ``reply_ref.extra`` (see :mod:`channels.telegram.refs`);
* a group upgraded to a supergroup: Telegram posts a service message in each
  chat, ``migrate_to_chat_id`` in the old group and ``migrate_from_chat_id`` in
  the new supergroup.  Either becomes the same MOVED event for the supergroup's
  thread (``moved_from`` = the group's), event id ``"<bot_id>:migrate:<group
  id>"``, so whichever arrives first moves the conversation and the other (or
  a redelivery) is a duplicate.  Never a turn (see agent_core.agent.move).

``event_id`` is ``"<bot_id>:<update_id>"``: Ingest de-duplicates redeliveries.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from telegram import Chat, Message, MessageEntity, Update, User

from agent_core.events import Action, Attachment, EventKind, InboundEvent, MessageRef, ThreadKey
from channels.mentions import BARE_MENTION_TEXT, cut_mentions
from channels.telegram import refs

CHANNEL = "telegram"

# How long the other items of an accepted album are accepted after the last one.
ALBUM_MEMORY_SECS = 10.0
ALBUM_MEMORY_MAX = 1024  # albums remembered at once (the oldest are forgotten first)

# /name or /name@bot, then whitespace or the end: the agent's command grammar
# (agent_core/agent/parser.py), with the target bot captured.
_COMMAND = re.compile(r"/([A-Za-z][A-Za-z0-9_\-]{0,31})(?:@([A-Za-z0-9_]+))?(?=\s|$)")


class AlbumMemory:
    """Albums (chat id, media_group_id) accepted recently, so their siblings are too.

    In memory: :func:`parse_update` is synchronous and has no Redis handle.  With
    polling (one poller per bot) every item passes here; in webhook mode the
    endpoint also shares the record through Redis (``keys.album``), so items
    that reach different web processes are accepted too.
    """

    __slots__ = ("_clock", "_ttl", "_until")

    def __init__(
        self, ttl: float = ALBUM_MEMORY_SECS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._until: dict[tuple[int, str], float] = {}

    def remember(self, chat_id: int, group: str) -> None:
        now = self._clock()
        self._until.pop((chat_id, group), None)  # re-insert: newest last
        self._until[(chat_id, group)] = now + self._ttl
        while self._until:
            key, until = next(iter(self._until.items()))
            if until > now and len(self._until) <= ALBUM_MEMORY_MAX:
                break
            del self._until[key]

    def accepted(self, chat_id: int, group: str) -> bool:
        until = self._until.get((chat_id, group))
        return until is not None and until > self._clock()


@dataclass(frozen=True, slots=True)
class ParseContext:
    bot_id: str
    username: str = ""  # without '@'
    group_reply: str = "mention"  # mention | all
    edited_messages: str = "ignore"  # ignore | reply
    _mention_re: re.Pattern[str] | None = field(default=None, compare=False)
    albums: AlbumMemory = field(default_factory=AlbumMemory, compare=False, repr=False)

    def mention_re(self) -> re.Pattern[str] | None:
        if not self.username:
            return None
        if self._mention_re is None:
            pat = re.compile(rf"(?<![\w@])@{re.escape(self.username)}\b", re.IGNORECASE)
            object.__setattr__(self, "_mention_re", pat)
        return self._mention_re


def _user_name(user: User | None, chat: Chat | None) -> str:
    if user is not None:
        return user.full_name or user.username or str(user.id)
    if chat is not None:
        return chat.title or chat.username or str(chat.id)
    return ""


def _thread_of(msg: Message) -> str:
    if msg.is_topic_message and msg.message_thread_id:
        return str(msg.message_thread_id)
    return ""


def _attachments(msg: Message) -> tuple[Attachment, ...]:
    out: list[Attachment] = []
    if msg.photo:
        p = msg.photo[-1]  # the largest size
        out.append(Attachment("image", "photo.jpg", "image/jpeg", p.file_size or 0, p.file_id))
    if msg.document is not None:
        d = msg.document
        mime = d.mime_type or ""
        kind = mime.split("/", 1)[0] if mime.startswith(("image/", "audio/", "video/")) else ""
        out.append(
            Attachment(kind or "document", d.file_name or "", mime, d.file_size or 0, d.file_id)
        )
    if msg.voice is not None:
        v = msg.voice
        out.append(
            Attachment(
                "audio", "voice.ogg", v.mime_type or "audio/ogg", v.file_size or 0, v.file_id
            )
        )
    if msg.audio is not None:
        a = msg.audio
        out.append(
            Attachment("audio", a.file_name or "", a.mime_type or "", a.file_size or 0, a.file_id)
        )
    if msg.video is not None:
        vd = msg.video
        out.append(
            Attachment(
                "video", vd.file_name or "", vd.mime_type or "", vd.file_size or 0, vd.file_id
            )
        )
    if msg.video_note is not None:
        vn = msg.video_note
        out.append(Attachment("video", "", "video/mp4", vn.file_size or 0, vn.file_id))
    return tuple(out)


def _shared(msg: Message) -> str:
    """A message without text the agent can still answer, in words ("" if none)."""
    if msg.sticker is not None:
        return f"[sticker {msg.sticker.emoji}]" if msg.sticker.emoji else "[sticker]"
    if msg.venue is not None:  # before location: a venue carries one too
        v, at = msg.venue, msg.venue.location
        return f"[venue: {v.title}, {v.address} ({at.latitude}, {at.longitude})]"
    if msg.location is not None:
        return f"[location: {msg.location.latitude}, {msg.location.longitude}]"
    if msg.contact is not None:
        c = msg.contact
        name = " ".join(n for n in (c.first_name, c.last_name) if n)
        return f"[contact: {name}, {c.phone_number}]"
    if msg.poll is not None:
        options = " / ".join(o.text for o in msg.poll.options)
        return f"[poll: {msg.poll.question} (options: {options})]"
    if msg.dice is not None:
        return f"[dice {msg.dice.emoji}: {msg.dice.value}]"
    return ""


def _mentions(msg: Message, ctx: ParseContext, text: str) -> bool:
    ents = msg.entities or msg.caption_entities or ()
    for e in ents:
        if (
            e.type == MessageEntity.TEXT_MENTION
            and e.user is not None
            and str(e.user.id) == ctx.bot_id
        ):
            return True
    pat = ctx.mention_re()
    if pat is not None and pat.search(text):
        return True
    reply = msg.reply_to_message
    return bool(
        reply is not None
        and reply.forum_topic_created is None  # topic messages "reply" to the topic head
        and reply.from_user is not None
        and str(reply.from_user.id) == ctx.bot_id
    )


def _strip_mention(text: str, ctx: ParseContext) -> str:
    pat = ctx.mention_re()
    if pat is None:
        return text.strip()
    return cut_mentions(pat, text).strip()


def _parse_callback(update: Update, ctx: ParseContext) -> InboundEvent | None:
    cq = update.callback_query
    if cq is None or cq.data is None or cq.message is None:
        return None  # inline-mode or game buttons: not ours
    msg = cq.message
    chat = msg.chat
    thread = _thread_of(msg) if isinstance(msg, Message) else ""
    return InboundEvent(
        event_id=f"{ctx.bot_id}:{update.update_id}",
        kind=EventKind.ACTION,
        channel=CHANNEL,
        thread=ThreadKey(CHANNEL, ctx.bot_id, str(chat.id), thread),
        user_id=str(cq.from_user.id),
        user_name=_user_name(cq.from_user, None),
        is_direct=chat.type == Chat.PRIVATE,
        mentions_bot=True,
        action=Action(token=cq.data),
        reply_ref=MessageRef(
            CHANNEL,
            str(chat.id),
            str(msg.message_id),
            thread,
            extra=refs.encode_callback(cq.id),
        ),
        received_at=time.time(),
    )


def _command(msg: Message, raw_text: str) -> tuple[str, str, str] | None:
    """(``/name``, target bot or "", the rest) when the message is a bot command."""
    m = _COMMAND.match(raw_text)
    if m is not None:
        return "/" + m.group(1), m.group(2) or "", raw_text[m.end() :]
    ents = msg.entities if msg.text else msg.caption_entities
    for e in ents or ():
        if e.type == MessageEntity.BOT_COMMAND and e.offset == 0 and e.length > 1:
            head = raw_text[: e.length]  # commands are ASCII: UTF-16 length = characters
            cmd, _, target = head.partition("@")
            return cmd, target, raw_text[e.length :]
    return None


def _parse_migration(msg: Message, ctx: ParseContext) -> InboundEvent | None:
    """The group became a supergroup: its conversation continues there."""
    if msg.migrate_to_chat_id:
        old, new = msg.chat.id, msg.migrate_to_chat_id
    elif msg.migrate_from_chat_id:
        old, new = msg.migrate_from_chat_id, msg.chat.id
    else:
        return None
    user = msg.from_user
    return InboundEvent(
        event_id=f"{ctx.bot_id}:migrate:{old}",
        kind=EventKind.MOVED,
        channel=CHANNEL,
        thread=ThreadKey(CHANNEL, ctx.bot_id, str(new), ""),
        user_id=str(user.id) if user is not None else f"chat{new}",
        user_name=_user_name(user, msg.chat),
        is_direct=False,
        received_at=time.time(),
        moved_from=ThreadKey(CHANNEL, ctx.bot_id, str(old), ""),
    )


def may_name_unknown_bot(update: Update, ctx: ParseContext) -> bool:
    """Whether this update cannot be judged yet: the bot's @name is unknown (getMe
    has not answered since start, and no earlier start stored it) and it is a group message that may name the bot -
    an "@" in its text or caption (``@bot``, ``/cmd@bot``), or an album item (the
    album's caption, on another item, may).  Parsed now it could be taken for a
    message to someone else and dropped for good."""
    if ctx.username:
        return False
    msg = update.message
    if msg is None and ctx.edited_messages == "reply":
        msg = update.edited_message
    if msg is None or msg.chat.type == Chat.PRIVATE:
        return False
    if msg.sender_chat is None and msg.from_user is not None and msg.from_user.is_bot:
        return False  # never answered anyway
    return "@" in (msg.text or msg.caption or "") or bool(msg.media_group_id)


def parse_update(update: Update, ctx: ParseContext) -> InboundEvent | None:
    """The event this update means to Parley, or None when it is not for us."""
    if update.callback_query is not None:
        return _parse_callback(update, ctx)
    if update.message is not None and (
        update.message.migrate_to_chat_id or update.message.migrate_from_chat_id
    ):
        return _parse_migration(update.message, ctx)
    msg = update.message
    if msg is None and ctx.edited_messages == "reply":
        msg = update.edited_message
    if msg is None:
        return None  # edits (by default), channel posts, polls, member updates ...
    user = msg.from_user
    on_behalf = msg.sender_chat  # anonymous group admin, or a user posting as a channel
    if on_behalf is None and user is not None and user.is_bot:
        return None  # never answer bots (loops)
    raw_text = msg.text or msg.caption or ""
    attachments = _attachments(msg)
    chat = msg.chat
    is_direct = chat.type == Chat.PRIVATE
    # (not edits: a live location is one edit every few seconds)
    shared = "" if raw_text.strip() or attachments or msg is not update.message else _shared(msg)
    if shared:  # a sticker, location, ...: in a group only as a reply to the bot
        if not (is_direct or _mentions(msg, ctx, "")):
            return None
        raw_text = shared
    elif not raw_text.strip() and not attachments:
        return None  # service messages, games, ...
    kind = EventKind.MESSAGE
    mentioned = is_direct or _mentions(msg, ctx, raw_text)  # taken (passes a group's gate)
    addressed = mentioned  # to Parley for sure (a group's other bots have commands too)
    text = raw_text
    command = _command(msg, raw_text)
    if command is not None:
        cmd, target, rest = command
        if target and ctx.username and target.lower() != ctx.username.lower():
            return None  # a command for another bot in this group
        if target and not ctx.username and not is_direct:
            return None  # getMe has not answered: our @name is unknown, not taken for it
        kind = EventKind.COMMAND
        mentioned = True  # Parley's own commands work without @name
        addressed = addressed or bool(target)
        text = cmd + rest
    album = msg.media_group_id
    if album and not is_direct:
        if mentioned or ctx.group_reply == "all":
            ctx.albums.remember(chat.id, album)
        elif ctx.albums.accepted(chat.id, album):
            mentioned = addressed = True  # another item of an album addressed to the bot
            ctx.albums.remember(chat.id, album)
    if not is_direct and not mentioned and ctx.group_reply != "all":
        return None
    text = text if shared else _strip_mention(text, ctx)
    if not text and not attachments:
        text = BARE_MENTION_TEXT  # "@bot" alone: answered, like a greeting
    thread = _thread_of(msg)
    if on_behalf is not None:
        user_id = f"chat{on_behalf.id}"
        user_name = _user_name(None, on_behalf)
    elif user is not None:
        user_id = str(user.id)
        user_name = _user_name(user, None)
    else:
        return None
    return InboundEvent(
        event_id=f"{ctx.bot_id}:{update.update_id}",
        kind=kind,
        channel=CHANNEL,
        thread=ThreadKey(CHANNEL, ctx.bot_id, str(chat.id), thread),
        user_id=user_id,
        user_name=user_name,
        text=text,
        is_direct=is_direct,
        mentions_bot=addressed and not is_direct,
        attachments=attachments,
        reply_ref=MessageRef(CHANNEL, str(chat.id), str(msg.message_id), thread),
        received_at=time.time(),
        batch=album or "",
    )
