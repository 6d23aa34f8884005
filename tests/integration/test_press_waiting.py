"""The worker reports presses that cannot run at once to a channel's optional
``press_waiting`` hook (agent_core/outbox.py), and only those."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

from agent_core.events import Action, EventKind, InboundEvent, ThreadKey
from agent_core.store.client import RedisClients
from tests.fakes.outbox import RecordingOutbox
from tests.integration.test_delivery import SlowEcho, make_worker, msg, wait_for


@dataclass
class PressOutbox(RecordingOutbox):
    waiting: list[str] = field(default_factory=list)

    def press_waiting(self, event: InboundEvent) -> None:
        self.waiting.append(event.event_id)


def press(thread: ThreadKey, n: int) -> InboundEvent:
    return replace(
        msg(thread, n), event_id=f"p{n}", kind=EventKind.ACTION, text="", action=Action("ap:x:a")
    )


async def test_only_presses_that_cannot_run_at_once_are_reported(
    redis_clients: RedisClients,
) -> None:
    llm = SlowEcho(0.0)
    llm.block = asyncio.Event()
    outbox = PressOutbox()
    here = make_worker(redis_clients, llm, outbox, "here")
    other = make_worker(redis_clients, llm, outbox, "other")
    busy, idle, queued = (ThreadKey("web", "local", n) for n in ("busy", "idle", "queued"))
    entries: Any = []

    def entry(ev: InboundEvent) -> list[tuple[bytes, InboundEvent]]:
        entries.append(ev)
        return [(f"{len(entries)}-0".encode(), ev)]

    try:
        await here._hand_off(entry(msg(busy, 1)), ack=False)  # a turn that waits on the model
        await wait_for(lambda: any(llm.active.values()))
        await here._hand_off(entry(press(busy, 1)), ack=False)  # behind it, same worker
        await other._hand_off(entry(press(busy, 2)), ack=False)  # lock held by `here`
        await here._hand_off(entry(press(idle, 3)), ack=False)  # runs at once
        # a message and a press for one idle thread in one batch: the press comes second
        await here._hand_off([*entry(msg(queued, 4)), *entry(press(queued, 5))], ack=False)
        assert outbox.waiting == ["p1", "p2", "p5"]
    finally:
        llm.block.set()
        await wait_for(lambda: not here.running and not other.running)
