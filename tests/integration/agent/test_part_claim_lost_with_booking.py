"""A reply part whose pacing booking was lost with its Redis connection is sent by
the rerun, not taken for "maybe sent".

Telegram, Slack and Discord send a part's claim in the round trip that books the
pacing slot (``Pacer.reserve(claim=wire_claim())``).  When that round trip's reply
is lost (the connection dropped after the server ran it), the claim may be there
while the request never left, and taking it back fails on the same outage.  What the
user saw before: no answer at all.  The turn was requeued, the rerun found the
``pending:`` claim, waited ``part_wait_secs`` and took the part for sent; the
message was consumed and the answer (or a notice, a command's reply, an approval
prompt) never went out.  Now the claim of a send that never reached ``on_wire()`` is
taken back by the writer, by the worker before it lets the thread go, or by its
sweeper once Redis answers; the rerun then sends the part.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_core.agent.reply import ReplyWriter
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.ingest import Ingest
from agent_core.outbox import on_wire, wire_claim
from agent_core.store import keys, pacing
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from agent_core.store.pacing import Pacer, pace_key
from tests.fakes.outbox import RecordingOutbox
from tests.integration.test_delivery import SlowEcho, make_worker, msg, wait_for


@dataclass
class PacedOutbox(RecordingOutbox):
    """Sends as channels/telegram/sender.py does: book the pace with the part's
    claim riding along, wait if told to, ``on_wire()``, then the platform request."""

    pacer: Any = None
    wire_hook: bool = True
    requests: list[str] = field(default_factory=list)

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        delay = await self.pacer.reserve([(pace_key("t", str(thread)), 0.0)], claim=wire_claim())
        if delay:
            await asyncio.sleep(delay)
        await on_wire()
        self.requests.append(message.text)
        return await super().send(thread, message, reply_to=reply_to)


# How many attempts to take the claim back fail with the outage: the pacer's own
# (then the writer's succeeds), also the writer's (the worker's, before it lets the
# thread go), also the worker's (its sweeper's, once Redis answers).
@pytest.mark.parametrize("failed_take_backs", [1, 2, 3])
async def test_a_part_whose_booking_was_lost_with_the_connection_is_sent_by_the_rerun(
    redis_clients: RedisClients, monkeypatch: pytest.MonkeyPatch, failed_take_backs: int
) -> None:
    r = redis_clients.redis
    monkeypatch.setattr(ReplyWriter, "part_wait_secs", 1.0)  # 15 s in production
    outbox = PacedOutbox(pacer=Pacer(r))
    real_pipelined = pacing.run_pipelined
    real_unclaim = Delivery.unclaim_part
    state = {"dropped": False, "failed": 0}

    async def pipelined(redis: Any, calls: Any, *a: Any, **k: Any) -> Any:
        res = await real_pipelined(redis, calls, *a, **k)
        if len(calls) > 1 and not state["dropped"]:  # the booking with the claim ran...
            state["dropped"] = True
            raise RedisConnectionError("Connection to Redis lost")  # ...its reply is lost
        return res

    async def unclaim(self: Delivery, *a: Any, **k: Any) -> bool:
        if state["dropped"] and state["failed"] < failed_take_backs:  # the same outage
            state["failed"] += 1
            raise RedisConnectionError("Connection to Redis lost")
        return await real_unclaim(self, *a, **k)

    monkeypatch.setattr(pacing, "run_pipelined", pipelined)
    monkeypatch.setattr(Delivery, "unclaim_part", unclaim)
    w = make_worker(redis_clients, SlowEcho(0.0), outbox, "w1")
    t = ThreadKey("web", "local", "paced")
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    try:
        await Ingest(r).submit(msg(t, 1, "hello"))
        await wait_for(lambda: w.turns_done >= 1, 10)
        await wait_for(lambda: not w.running, 5)
        assert outbox.final_texts(str(t)) == ["echo: hello"], "the answer was never sent"
        assert state["dropped"] and state["failed"] == failed_take_backs
        assert outbox.requests == ["echo: hello"]  # once: the lost booking sent nothing
        assert await r.llen(keys.mailbox(t)) == 0
        assert await r.hgetall(keys.sent(t)) == {}
    finally:
        stop.set()
        await task
