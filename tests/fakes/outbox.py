"""An Outbox that records what the agent said (for core tests without a platform)."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from agent_core.events import InboundEvent, MessageRef, OutboundMessage, ThreadKey


@dataclass
class Sent:
    op: str  # send | edit | delete | action
    thread: str
    message_id: str
    message: OutboundMessage


@dataclass
class RecordingOutbox:
    channel: str = "web"
    stream_interval: float | None = None
    log: list[Sent] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    on_send: asyncio.Event | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        mid = str(next(self._ids))
        self.log.append(Sent("send", str(thread), mid, message))
        if self.on_send is not None:
            self.on_send.set()
        return MessageRef(self.channel, str(thread), mid)

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        self.log.append(Sent("edit", ref.conversation, ref.message_id, message))
        return ref

    async def delete(self, ref: MessageRef) -> None:
        self.log.append(Sent("delete", ref.conversation, ref.message_id, OutboundMessage("")))

    async def typing(self, thread: ThreadKey) -> None:
        return None

    async def turn_finished(self, thread: ThreadKey, event: InboundEvent | None) -> None:
        self.finished.append(event.event_id if event else "")

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        self.log.append(Sent("action", str(event.thread), "", OutboundMessage(text)))

    def sends(self, thread: str | None = None) -> list[Sent]:
        return [s for s in self.log if s.op == "send" and (thread is None or s.thread == thread)]

    def final_texts(self, thread: str | None = None) -> list[str]:
        """The last text of every message not deleted, in the order the messages
        were created."""
        latest: dict[str, str] = {}
        order: list[str] = []
        for s in self.log:
            if (thread is not None and s.thread != thread) or s.op == "action":
                continue
            if s.op == "delete":
                latest.pop(s.message_id, None)
                continue
            if s.message_id not in latest:
                order.append(s.message_id)
            latest[s.message_id] = s.message.text
        return [latest[m] for m in order if m in latest]
