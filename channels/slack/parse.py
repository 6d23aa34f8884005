"""Slack payloads -> InboundEvent (pure functions, no I/O).

Three inbound shapes reach Parley, over HTTP or Socket Mode alike:

* Events API ``event_callback`` bodies (DMs, mentions, thread follow-ups),
* interactivity ``block_actions`` payloads (approval button presses),
* slash commands (``/parley <text>``).

Thread rules: a DM is one conversation (or the thread if the user replies in
one); a channel conversation lives in a thread: ``thread_ts`` of the mention,
or the mention's own ``ts`` when it starts one.  Event ids are chosen so that
one Slack message yields one event whatever the path: ``m:<channel>:<ts>``
for messages (a retried delivery, and the ``message`` copy of an
``app_mention``, share it), ``a:<channel>:<message_ts>:<action_ts>`` for
presses, ``c:<trigger_id>`` for slash commands.

Text: Slack's wire markup is made plain (:func:`plain_text`, the bot's own
mention removed); a shared / forwarded message (a legacy ``attachments[]``
entry with ``is_share``) is appended as a quote with its author; a message that
was only the bot's mention becomes :data:`BARE_MENTION_TEXT`.

Shapes are checked, not assumed: a field Parley reads that has the wrong JSON
type (an ``event`` that is not an object, a ``channel`` that is a list, ...)
raises :class:`MalformedPayload` (a ``ValueError``: the HTTP route answers
400), while a well-formed payload Parley does not handle yields ``None``.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from agent_core.events import Action, Attachment, EventKind, InboundEvent, MessageRef, ThreadKey
from channels.mentions import BARE_MENTION_TEXT, cut_mentions

from .render import ACTION_PREFIX

CHANNEL = "slack"
RESPONSE_URL_PREFIX = "ru:"  # MessageRef.extra holding a response_url
# What the agent sees when a message only mentions the bot ("<@UBOT>" alone).

# Message subtypes that carry a user's words; every other subtype (message_changed,
# message_deleted, channel_join, bot_message, ...) is ignored.
_USER_SUBTYPES = (None, "", "file_share", "thread_broadcast", "me_message")

_SPECIAL = re.compile(r"<([@#!])([^>|]+)(?:\|([^>]*))?>")
_LINK = re.compile(r"<((?:https?|mailto):[^>|]+)(?:\|([^>]*))?>")

Payload = dict[str, Any]


class MalformedPayload(ValueError):
    """A Slack payload whose shape is not one Slack sends (wrong JSON types)."""


def as_object(value: Any, what: str = "payload") -> Payload:
    """``value`` if it is a JSON object, ``{}`` if absent/null, else MalformedPayload."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedPayload(f"{what} is not an object")
    return value


def _str(obj: Payload, key: str) -> str:
    """A string field, ``""`` if absent/null; any other JSON type is MalformedPayload."""
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedPayload(f"{key!r} is not a string")
    return value


def _loose(obj: Payload, key: str) -> str:
    """A cosmetic string field (names, mime types): wrong types read as ``""``."""
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def is_dm(channel_id: str) -> bool:
    return channel_id.startswith("D")


def plain_text(text: str, bot_user_id: str = "") -> str:
    """Slack's wire text -> what the user typed (mentions of the bot removed)."""
    if bot_user_id:
        text = cut_mentions(re.compile(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>"), text)

    def special(m: re.Match[str]) -> str:
        kind, ident, label = m.group(1), m.group(2), m.group(3)
        name, _, rest = ident.partition("^")
        if kind == "!" and name == "date":  # <!date^epoch^format|fallback>: plain text
            return label or _utc_date(rest.partition("^")[0]) or ident
        if kind == "!" and name == "subteam":  # <!subteam^S1|@devs>: the group
            name = rest or name
        text = label or (name if kind == "!" else ident)
        sign = "#" if kind == "#" else "@"
        return text if text.startswith(sign) else sign + text  # a label may carry its sign

    text = _SPECIAL.sub(special, text)
    text = _LINK.sub(
        lambda m: m.group(1) if not m.group(2) else f"{m.group(2)} ({m.group(1)})", text
    )
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return text.strip()


def _utc_date(epoch: str) -> str:
    """A ``<!date^...>`` token's time, when Slack sent no fallback text."""
    try:
        return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (ValueError, OverflowError, OSError):
        return ""


def file_attachments(files: Any) -> tuple[Attachment, ...]:
    """Slack file objects (an event's ``files[]``, a ``files.info`` answer's ``file``)
    -> Attachments; a Slack Connect file is its id only (``ref``, see files.py)."""
    out: list[Attachment] = []
    for f in files if isinstance(files, list) else ():
        if not isinstance(f, dict) or f.get("mode") == "tombstone":
            continue
        mime = _loose(f, "mimetype")
        major = mime.split("/", 1)[0]
        kind = major if major in ("image", "audio", "video") else "document"
        size = f.get("size")
        out.append(
            Attachment(
                kind=kind,
                name=_loose(f, "name") or _loose(f, "title"),
                mime=mime,
                size=size if type(size) is int and size >= 0 else 0,
                ref=_loose(f, "url_private_download")
                or _loose(f, "url_private")
                or _loose(f, "id"),
            )
        )
    return tuple(out)


def _shared(items: Any) -> tuple[list[str], tuple[Attachment, ...]]:
    """Shared / forwarded messages in legacy ``attachments[]``: (quotes, their files)."""
    quotes: list[str] = []
    files: list[Attachment] = []
    for att in items if isinstance(items, list) else ():
        if not isinstance(att, dict) or not (att.get("is_share") or att.get("is_msg_unfurl")):
            continue  # link previews and app attachments are not the user's words
        body = plain_text(_loose(att, "text") or _loose(att, "fallback"))
        files.extend(file_attachments(att.get("files")))
        if not body:
            continue
        author = _loose(att, "author_name") or _loose(att, "author_subname")
        head = f"Shared message from {author}:" if author else "Shared message:"
        quotes.append(head + "\n" + "\n".join("> " + line for line in body.split("\n")))
    return quotes, tuple(files)


def bot_user_of(body: Payload, default: str = "") -> str:
    """The bot's own user id: from auth.test (default) or the event's authorizations."""
    if default:
        return default
    auths = body.get("authorizations")
    for auth in auths if isinstance(auths, list) else ():
        if isinstance(auth, dict) and auth.get("is_bot") and _loose(auth, "user_id"):
            return _loose(auth, "user_id")
    return ""


def followup_candidate(
    body: Payload, bot_user_id: str = "", *, team: str = ""
) -> tuple[str, str, str] | None:
    """(team, channel, thread_ts) when this is a plain channel message in a thread.

    Whether Parley answers it depends on whether it takes part in that thread,
    which the caller looks up and passes to :func:`parse_event`.
    """
    if body.get("type") != "event_callback":
        return None
    ev = as_object(body.get("event"), "event")
    if ev.get("type") != "message" or ev.get("channel_type") == "im":
        return None
    if ev.get("subtype") not in _USER_SUBTYPES or ev.get("bot_id") or not _str(ev, "user"):
        return None
    thread_ts = _str(ev, "thread_ts")
    if not thread_ts:
        return None
    return team or _team(body, ev), _str(ev, "channel"), thread_ts


def _team(body: Payload, ev: Payload) -> str:
    """The workspace Parley is installed in, for an Events API body whose caller
    does not know it (auth.test did not answer).  In a Slack Connect channel hosted
    by another organisation the body's ``team_id`` is the host's; the installation's
    is ``authorizations[0].team_id`` (as slack_bolt's extract_team_id reads it)."""
    auths = body.get("authorizations")
    first = auths[0] if isinstance(auths, list) and auths else None
    installed = _str(first, "team_id") if isinstance(first, dict) else ""
    return installed or _str(body, "team_id") or _str(ev, "team") or _str(ev, "user_team")


def parse_event(
    body: Payload,
    *,
    bot_user_id: str = "",
    group_reply: str = "mention",
    in_bot_thread: bool = False,
    received_at: float | None = None,
    team: str = "",
) -> InboundEvent | None:
    """An Events API ``event_callback`` body -> InboundEvent, or None to ignore it.
    ``team``: the workspace Parley is installed in (auth.test), which keys every
    Slack conversation ('' : read from the body, see :func:`_team`)."""
    if body.get("type") != "event_callback":
        return None
    ev = as_object(body.get("event"), "event")
    bot = bot_user_of(body, bot_user_id)
    etype = ev.get("type")
    if etype not in ("message", "app_mention"):
        return None  # a well-formed event Parley does not handle
    # never answer another bot (loops), nor edits / deletions / joins
    if ev.get("bot_id") or ev.get("bot_profile"):
        return None
    if ev.get("subtype") not in _USER_SUBTYPES or ev.get("hidden"):
        return None
    if ev.get("edited"):
        # an edited message that mentions the app comes again as ``app_mention``
        # with ``edited`` (and the original's ts): edits are ignored, like
        # message_changed - else a typo fixed a day later runs the request again
        return None
    user = _str(ev, "user")
    channel = _str(ev, "channel")
    ts = _str(ev, "ts") or _str(ev, "event_ts")
    raw_text = _str(ev, "text")
    thread_ts = _str(ev, "thread_ts")
    team = team or _team(body, ev)
    if not user or (bot and user == bot) or not channel or not ts:
        return None
    mention = bool(bot) and f"<@{bot}>" in raw_text

    if etype == "app_mention":
        thread, direct, mentions = thread_ts or ts, False, True
    elif ev.get("channel_type") == "im" or (is_dm(channel) and ev.get("channel_type") is None):
        thread, direct, mentions = thread_ts, True, mention
    else:
        if mention:
            return None  # the app_mention event for this message is the one we answer
        if thread_ts and in_bot_thread:
            thread = thread_ts  # a follow-up in a thread Parley takes part in
        elif group_reply == "all":
            thread = thread_ts or ts
        else:
            return None
        direct, mentions = False, False

    text = plain_text(raw_text, bot)
    attachments = file_attachments(ev.get("files"))
    quotes, shared_files = _shared(ev.get("attachments"))
    text = "\n\n".join([text, *quotes] if text else quotes)
    attachments += shared_files
    if not text and not attachments:
        if not raw_text.strip():
            return None  # nothing the user said (e.g. a share Parley cannot read)
        text = BARE_MENTION_TEXT  # "<@UBOT>" alone: answered, like a greeting
    profile = ev.get("user_profile")
    profile = profile if isinstance(profile, dict) else {}
    name = (
        _loose(profile, "display_name") or _loose(profile, "real_name") or _loose(profile, "name")
    )
    return InboundEvent(
        event_id=f"m:{channel}:{ts}",
        kind=EventKind.MESSAGE,
        channel=CHANNEL,
        thread=ThreadKey(CHANNEL, team, channel, thread),
        user_id=user,
        user_name=name,
        text=text,
        is_direct=direct,
        mentions_bot=mentions,
        attachments=attachments,
        reply_ref=MessageRef(CHANNEL, channel, ts, thread=thread),
        received_at=time.time() if received_at is None else received_at,
    )


def parse_action(
    payload: Payload, *, received_at: float | None = None, team: str = ""
) -> InboundEvent | None:
    """A ``block_actions`` payload (a press on one of our buttons) -> action event.
    ``team``: the installation's workspace (auth.test; '': the payload's ``team.id``)."""
    if payload.get("type") != "block_actions":
        return None
    actions = payload.get("actions") or []
    if not isinstance(actions, list) or not all(isinstance(a, dict) for a in actions):
        raise MalformedPayload("'actions' is not a list of objects")
    action = next((a for a in actions if _str(a, "action_id").startswith(ACTION_PREFIX)), None)
    if action is None:
        return None
    value = _str(action, "value")
    user = as_object(payload.get("user"), "user")
    container = as_object(payload.get("container"), "container")
    message = as_object(payload.get("message"), "message")
    channel = _str(as_object(payload.get("channel"), "channel"), "id") or _str(
        container, "channel_id"
    )
    msg_ts = _str(container, "message_ts") or _str(message, "ts")
    user_id = _str(user, "id")
    thread = _str(message, "thread_ts") or _str(container, "thread_ts")
    team = team or _str(as_object(payload.get("team"), "team"), "id") or _str(user, "team_id")
    response_url = _str(payload, "response_url")
    action_ts = _str(action, "action_ts") or _str(payload, "trigger_id")
    if not value or not channel or not msg_ts or not user_id:
        return None
    if thread == msg_ts:
        thread = ""  # the prompt is itself a top-level message: its thread is the channel's
    extra = ""
    if container.get("is_ephemeral") and response_url:
        extra = RESPONSE_URL_PREFIX + response_url
    return InboundEvent(
        event_id=f"a:{channel}:{msg_ts}:{action_ts}",
        kind=EventKind.ACTION,
        channel=CHANNEL,
        thread=ThreadKey(CHANNEL, team, channel, thread),
        user_id=user_id,
        # user.username / user.name is the legacy handle, not the name Slack shows:
        # left empty, the display name is looked up (users.info, cached)
        user_name="",
        is_direct=is_dm(channel),
        mentions_bot=True,
        action=Action(token=value),
        reply_ref=MessageRef(CHANNEL, channel, msg_ts, thread=thread, extra=extra),
        received_at=time.time() if received_at is None else received_at,
    )


def parse_command(
    form: Payload, *, command: str = "/parley", received_at: float | None = None, team: str = ""
) -> InboundEvent | None:
    """A slash command (``/parley <text>``) -> a message event answered in its channel.
    ``team``: the installation's workspace (auth.test; '': the form's ``team_id``)."""
    name = str(form.get("command") or "")
    if command and name != command:
        return None
    channel = str(form.get("channel_id") or "")
    user = str(form.get("user_id") or "")
    trigger = str(form.get("trigger_id") or "")
    if not channel or not user or not trigger:
        return None
    text = plain_text(str(form.get("text") or "")) or "/help"
    response_url = str(form.get("response_url") or "")
    team = team or str(form.get("team_id") or "")
    return InboundEvent(
        event_id=f"c:{trigger}",
        kind=EventKind.MESSAGE,
        channel=CHANNEL,
        thread=ThreadKey(CHANNEL, team, channel, ""),
        user_id=user,
        user_name="",  # the form's user_name is the legacy handle: looked up instead
        text=text,
        is_direct=is_dm(channel),
        mentions_bot=True,
        reply_ref=MessageRef(
            CHANNEL, channel, "", extra=RESPONSE_URL_PREFIX + response_url if response_url else ""
        ),
        received_at=time.time() if received_at is None else received_at,
    )
