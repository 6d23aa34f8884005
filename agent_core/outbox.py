"""How the agent talks back: the contract each channel's sender implements.

The agent hands an :class:`~agent_core.events.OutboundMessage` (markdown, maybe
buttons) to the thread's channel; the channel renders it, splits it at its
platform's limit, paces it under its platform's rate limits and returns a
:class:`~agent_core.events.MessageRef` so the message can be edited later
(streaming, resolving an approval prompt).
"""

from __future__ import annotations

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
        """Acknowledge a button press privately to its presser (e.g. 'not yours')."""
        ...
