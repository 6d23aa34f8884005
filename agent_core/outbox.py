"""How the agent talks back: the contract each channel's sender implements.

The agent hands an :class:`~agent_core.events.OutboundMessage` (markdown, maybe
buttons) to the thread's channel; the channel renders it, splits it at its
platform's limit, paces it under its platform's rate limits and returns a
:class:`~agent_core.events.MessageRef` so the message can be edited later
(streaming, resolving an approval prompt).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Protocol

from agent_core.events import InboundEvent, MessageRef, OutboundMessage, ThreadKey


class Outbox(Protocol):
    # Minimum seconds between streamed edits of one message; None: this channel
    # does not stream (the answer is sent once, whole).
    stream_interval: float | None

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        """Send a new message into ``thread``. Raises ChannelError subclasses."""
        ...

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        """Replace the message at ``ref`` (the whole text, buttons as given)."""
        ...

    async def typing(self, thread: ThreadKey) -> None:
        """Show a working indicator (best effort, never raises)."""
        ...

    async def turn_finished(self, thread: ThreadKey, event: InboundEvent | None) -> None:
        """The turn caused by ``event`` is over: clear indicators (best effort)."""
        ...

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """Acknowledge a button press privately to its presser (e.g. 'not yours').

        Called exactly once for every press the agent handles; ``text == ""``
        means "acknowledge silently" (Telegram needs every callback answered).
        """
        ...


# --- the wire hook ----------------------------------------------------------
# A channel whose sender sets ``wire_hook = True`` promises to ``await on_wire()``
# right before the platform request that creates a message (after its own
# pacing waits).  The agent uses the moment to claim the reply part in Redis,
# fenced by the thread lock, so the window in which a crash leaves it unsure
# whether a message reached the platform is the request itself, not the
# pacing wait before it.  The hook may raise (lock lost, part already sent):
# the channel must let that exception propagate and send nothing.

_ON_WIRE: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar(
    "parley_on_wire", default=None
)


async def on_wire() -> None:
    """Called by a channel right before the request that creates a message."""
    callback = _ON_WIRE.get()
    if callback is not None:
        _ON_WIRE.set(None)
        await callback()


def set_on_wire(callback: Callable[[], Awaitable[None]] | None) -> object:
    return _ON_WIRE.set(callback)


def reset_on_wire(token: object) -> None:
    _ON_WIRE.reset(token)  # type: ignore[arg-type]


# --- the part being sent -------------------------------------------------------
# The agent names every message it sends ("<event_id>:<n>").  A channel whose
# sender sets ``idempotent_parts = True`` uses that name so that sending the
# same part twice shows one message (the local channels key their transcript
# entries by it); the agent may then resend a part whose first sender died
# mid-send instead of leaving it unsent.

_PART: ContextVar[str | None] = ContextVar("parley_part", default=None)


def current_part() -> str | None:
    """The name of the reply part being sent, if the agent is sending one."""
    return _PART.get()


def set_current_part(name: str | None) -> object:
    return _PART.set(name)


def reset_current_part(token: object) -> None:
    _PART.reset(token)  # type: ignore[arg-type]
