"""The shared vocabulary every channel speaks.

Adapters turn a platform's raw events into :class:`InboundEvent` and turn
:class:`OutboundMessage` into platform calls.  Nothing here knows a platform's
field names: ``conversation`` is a Telegram chat id, a Slack channel id or a
Discord channel id, and only the adapter knows which.

Everything is a frozen dataclass with a compact JSON form (``to_json`` /
``from_json``) because events cross processes through Redis on every turn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

CHANNELS = ("telegram", "slack", "discord", "web", "console")


# Event ids of messages Parley makes itself (routines, heartbeat checks, notes).
SYNTHETIC_PREFIXES = ("routine:", "hb:", "note:", "expire:")


class EventKind(StrEnum):
    MESSAGE = "message"
    ACTION = "action"
    COMMAND = "command"
    # something Parley said outside a turn (a routine's message) that the thread's
    # history should hold, so a reply to it has its context; never answered
    NOTE = "note"
    # The platform gave the conversation ``moved_from`` a new id: it continues
    # in ``thread`` (a Telegram group upgraded to a supergroup).  Never a turn:
    # the worker moves the conversation's state (agent_core.agent.move).
    MOVED = "moved"
    # An approval's time ran out (queued by the scheduler, text = the approval's id):
    # its prompt loses its buttons and the wait ends.  Never answered by itself.
    EXPIRY = "expiry"


def _escape(part: str) -> str:
    # ':' separates the parts and '{' '}' delimit a Redis hash tag, so none of
    # them may appear raw inside a part.
    return part.replace("%", "%25").replace(":", "%3A").replace("{", "%7B").replace("}", "%7D")


def _unescape(part: str) -> str:
    return part.replace("%7D", "}").replace("%7B", "{").replace("%3A", ":").replace("%25", "%")


@dataclass(frozen=True, slots=True)
class ThreadKey:
    """One conversation with the agent.

    ``tenant`` is the Slack team / Discord guild / Telegram bot, ``conversation``
    the chat / channel / DM and ``thread`` the Slack thread_ts, Telegram forum
    topic or Discord thread ('' when there is none).
    """

    channel: str
    tenant: str
    conversation: str
    thread: str = ""
    # The escaped text form, computed once: every Redis key of a turn embeds it.
    _text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        text = ":".join(
            _escape(p) for p in (self.channel, self.tenant, self.conversation, self.thread)
        )
        object.__setattr__(self, "_text", text)

    def __str__(self) -> str:
        return self._text

    @property
    def tag(self) -> str:
        """The Redis hash tag: every per-thread key embeds it."""
        return "{" + str(self) + "}"

    @classmethod
    def parse(cls, text: str) -> ThreadKey:
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        parts = text.split(":")
        if len(parts) != 4 or not parts[0]:
            raise ValueError(f"not a thread key: {text!r}")
        return cls(*(_unescape(p) for p in parts))


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file the user sent. Fetched by the channel on demand, never eagerly."""

    kind: str  # image | document | audio | video | other
    name: str = ""
    mime: str = ""
    size: int = 0
    ref: str = ""  # platform file id / URL, meaningful to the channel only

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.kind, "n": self.name, "m": self.mime, "s": self.size, "r": self.ref}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Attachment:
        return cls(d["k"], d.get("n", ""), d.get("m", ""), d.get("s", 0), d.get("r", ""))


@dataclass(frozen=True, slots=True)
class Action:
    """A button press: which approval, which decision (approve | always | deny)."""

    token: str
    decision: str = ""


@dataclass(frozen=True, slots=True)
class MessageRef:
    """Where a sent message lives, so it can be edited later."""

    channel: str
    conversation: str
    message_id: str
    thread: str = ""
    extra: str = ""  # adapter-private detail (e.g. Discord interaction token)

    def to_dict(self) -> dict[str, str]:
        return {
            "c": self.channel,
            "v": self.conversation,
            "m": self.message_id,
            "t": self.thread,
            "x": self.extra,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MessageRef:
        return cls(d["c"], d["v"], d["m"], d.get("t", ""), d.get("x", ""))


@dataclass(frozen=True, slots=True)
class InboundEvent:
    event_id: str
    kind: EventKind
    channel: str
    thread: ThreadKey
    user_id: str
    user_name: str = ""
    text: str = ""
    is_direct: bool = True
    mentions_bot: bool = False
    attachments: tuple[Attachment, ...] = ()
    action: Action | None = None
    reply_ref: MessageRef | None = None
    received_at: float = field(default_factory=time.time)
    seq: int = 0  # per-thread arrival number, assigned at ingest (0: none)
    # items the person sent together that the platform delivers one by one (a
    # Telegram album): a turn starting with one waits briefly for the rest
    batch: str = ""
    moved_from: ThreadKey | None = None  # kind MOVED: the conversation that continues here

    @property
    def qualified_user(self) -> str:
        """Channel-qualified user id, as used by ALLOWED_USERS / APPROVER_IDS."""
        return f"{self.channel}:{self.user_id}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.event_id,
            "k": self.kind.value,
            "ch": self.channel,
            "th": str(self.thread),
            "u": self.user_id,
            "at": self.received_at,
        }
        if self.user_name:
            d["un"] = self.user_name
        if self.text:
            d["tx"] = self.text
        if not self.is_direct:
            d["dm"] = False
        if self.mentions_bot:
            d["mb"] = True
        if self.attachments:
            d["att"] = [a.to_dict() for a in self.attachments]
        if self.action is not None:
            d["act"] = [self.action.token, self.action.decision]
        if self.reply_ref is not None:
            d["rr"] = self.reply_ref.to_dict()
        if self.seq:
            d["sq"] = self.seq
        if self.batch:
            d["bt"] = self.batch
        if self.moved_from is not None:
            d["mv"] = str(self.moved_from)
        return d

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InboundEvent:
        act = d.get("act")
        rr = d.get("rr")
        mv = d.get("mv")
        return cls(
            event_id=d["id"],
            kind=EventKind(d["k"]),
            channel=d["ch"],
            thread=ThreadKey.parse(d["th"]),
            user_id=d["u"],
            user_name=d.get("un", ""),
            text=d.get("tx", ""),
            is_direct=d.get("dm", True),
            mentions_bot=d.get("mb", False),
            attachments=tuple(Attachment.from_dict(a) for a in d.get("att", ())),
            action=Action(act[0], act[1]) if act else None,
            reply_ref=MessageRef.from_dict(rr) if rr else None,
            received_at=d.get("at", 0.0),
            seq=d.get("sq", 0),
            batch=d.get("bt", ""),
            moved_from=ThreadKey.parse(mv) if mv else None,
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> InboundEvent:
        return cls.from_dict(orjson.loads(raw))


class ButtonStyle(StrEnum):
    PRIMARY = "primary"
    SECONDARY = "secondary"
    DANGER = "danger"


@dataclass(frozen=True, slots=True)
class Button:
    """A button; ``payload`` is an opaque ASCII token of at most 64 bytes."""

    label: str
    payload: str
    style: ButtonStyle = ButtonStyle.SECONDARY

    def __post_init__(self) -> None:
        if len(self.payload.encode()) > 64 or not self.payload.isascii():
            raise ValueError("button payload must be ASCII and at most 64 bytes")


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """What the agent says. ``text`` is markdown; the channel renders it."""

    text: str
    buttons: tuple[Button, ...] = ()
    edit_of: MessageRef | None = None
    final: bool = True  # False while a streamed answer is still growing
    notice: bool = False  # a short system notice (errors, hints), not an answer
    private_to: str = ""  # user id: show only to this user where the platform can
    # an access refusal (not allowed, too fast, a pairing code): the message was not
    # taken, its sender is not someone Parley talks with (a notice too)
    refusal: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"tx": self.text}
        if self.buttons:
            d["b"] = [[b.label, b.payload, b.style.value] for b in self.buttons]
        if self.edit_of is not None:
            d["e"] = self.edit_of.to_dict()
        if not self.final:
            d["f"] = False
        if self.notice:
            d["n"] = True
        if self.private_to:
            d["p"] = self.private_to
        if self.refusal:
            d["r"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutboundMessage:
        e = d.get("e")
        return cls(
            text=d["tx"],
            buttons=tuple(Button(b[0], b[1], ButtonStyle(b[2])) for b in d.get("b", ())),
            edit_of=MessageRef.from_dict(e) if e else None,
            final=d.get("f", True),
            notice=d.get("n", False),
            private_to=d.get("p", ""),
            refusal=d.get("r", False),
        )
