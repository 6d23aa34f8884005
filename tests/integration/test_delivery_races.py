"""Delivery races between a turn and a hand-off or an index write of another process."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_core.events import InboundEvent, ThreadKey
from agent_core.ingest import Ingest
from agent_core.llm.base import Completion, CompletionRequest
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from tests.fakes.outbox import RecordingOutbox
from tests.integration.test_delivery import SlowEcho, make_worker, msg, wait_for


class ShowsAll(SlowEcho):
    """SlowEcho that keeps every request's user messages."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.shown: list[list[str]] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.shown.append([m.content for m in request.messages if m.role == "user"])
        return await super().complete(request)


async def test_a_late_arrival_at_the_gap_deadline_is_answered_in_order(
    redis_clients: RedisClients,
) -> None:
    """What the user saw: a message read by a worker that stalled turned up just as
    the wait for it ran out; it was never answered, and the message after it was
    answered twice.  The turn had read the mailbox and decided to run the head
    without the missing one; the late hand-off, landing before the skip was written,
    still saw the old ``next`` and went before the head; the completion then removed
    the first entry, the late event instead of the head it ran.  Now the skip is
    written only while the head is unchanged (else the turn begins again, and the
    late one runs first), and a completion removes the entries it ran by event id."""
    r = redis_clients.redis
    d = Delivery(r, redis_clients.blocking)
    await d.ensure_group()
    t = ThreadKey("web", "local", "gapdeadline")
    ingest = Ingest(r)
    await ingest.submit(msg(t, 1, "first"))
    late = await d.read("stalled", count=10, block_ms=100)  # its reader stalls
    await r.xack(keys.INBOX_STREAM, keys.INBOX_GROUP, late[0][0])
    await ingest.submit(msg(t, 2, "second"))
    outbox = RecordingOutbox()
    llm = ShowsAll()
    w = make_worker(redis_clients, llm, outbox, "w", reclaim_idle_secs=0.2)
    real_skip = w.delivery.skip_gap

    async def skip_gap(*args: Any) -> Any:
        # the stalled reader's hand-off lands between the turn's begin and the skip
        ev = late[0][1]
        assert ev is not None
        await Delivery(r, redis_clients.blocking).handoff([(b"", ev)], "stalled")
        w.delivery.skip_gap = real_skip  # type: ignore[method-assign]
        return await real_skip(*args)

    w.delivery.skip_gap = skip_gap  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    try:
        await wait_for(lambda: w.turns_done >= 1 and not w.running, 8)
        await asyncio.sleep(0.3)  # a second answer would have come by now
    finally:
        stop.set()
        await task
    # both messages reached the model once each, in order (the turn of "first" takes
    # in "second", which came right after it), and nothing was answered twice
    assert llm.shown[-1] == ["first", "second"], llm.shown
    texts = outbox.final_texts(str(t))
    assert len(texts) == len(set(texts)), texts
    assert await r.llen(keys.mailbox(t)) == 0


async def test_a_completion_removes_the_events_it_ran_whatever_came_before(
    redis_clients: RedisClients,
) -> None:
    """The completion's second guard: an event put before the ones a turn ran (the
    same race, any other way) stays queued; only the events that ran go."""
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    t = ThreadKey("web", "local", "byid")
    [(_, state)] = await d.handoff_and_begin([(b"", msg(t, 2))], "w1")
    await redis_clients.redis.lpush(keys.mailbox(t), msg(t, 1).to_json())
    left = await d.complete(
        t, "w1", consumed=state.mailbox[:1], session_json=None, version=0, sent_fields=[]
    )
    assert left == 1
    assert [e.event_id for e in await d.peek(t, 0)] == ["e1"]


async def test_a_failed_readd_to_the_index_is_sent_again(
    redis_clients: RedisClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the user saw: a message never answered.  A process's index removal
    (ZREM, then LLEN) found the mailbox refilled by another process's hand-off, and
    its ZADD putting the thread back failed (a connection reset): the thread was out
    of the active index for good, so when the process running it died, no sweeper
    ever looked at it again.  Now a failed re-add is sent again with the process's
    next index round trip (its sweeper's tick), until it goes through."""
    r = redis_clients.redis
    t = ThreadKey("web", "local", "strand")
    outbox = RecordingOutbox()
    w1 = Delivery(r, redis_clients.blocking, lock_ttl_ms=1000)
    await w1.handoff([(b"", msg(t, 1, "first"))], "w1")
    assert (
        await w1.complete(
            t, "w1", consumed=[msg(t, 1)], session_json=None, version=0, sent_fields=[]
        )
        == 0
    )
    w1.leave_index_later(t)  # its removal rides in w1's next round trip
    # another process hands off the next message: it takes the lock and runs it
    w2 = Delivery(r, redis_clients.blocking, lock_ttl_ms=1000)
    await w2.handoff([(b"", msg(t, 2, "second"))], "w2")
    real_zadd = r.zadd

    async def zadd(*a: Any, **k: Any) -> Any:
        raise RedisConnectionError("connection reset")

    monkeypatch.setattr(r, "zadd", zadd)
    with pytest.raises(RedisConnectionError):
        await w1.flush_index()  # ZREM, LLEN = 1, the re-add fails
    monkeypatch.setattr(r, "zadd", real_zadd)
    assert await r.zscore(keys.ACTIVE_THREADS, str(t)) is None
    await w1.flush_index()  # w1's sweeper tick
    assert await r.zscore(keys.ACTIVE_THREADS, str(t)) is not None
    # w2 dies mid-turn: its lock expires, and another worker answers "second"
    w3 = make_worker(redis_clients, SlowEcho(0.0), outbox, "w3", lock_ttl_secs=1.0)
    stop3 = asyncio.Event()
    task3 = asyncio.create_task(w3.run(stop3))
    try:
        await wait_for(lambda: "echo: second" in outbox.final_texts(str(t)), 8)
    finally:
        stop3.set()
        await task3


async def test_a_failed_deactivate_puts_the_thread_back_in_the_index(
    redis_clients: RedisClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``deactivate`` (ZREM, LLEN, re-add if refilled) had the same hole: a failed
    re-add left a thread with mail out of the index.  It is sent again too."""
    r = redis_clients.redis
    t = ThreadKey("web", "local", "deact")
    d = Delivery(r, redis_clients.blocking)
    await d.handoff([(b"", msg(t, 1))], "w1")
    real_zadd = r.zadd

    async def zadd(*a: Any, **k: Any) -> Any:
        raise RedisConnectionError("connection reset")

    monkeypatch.setattr(r, "zadd", zadd)
    with pytest.raises(RedisConnectionError):
        await d.deactivate(t)
    monkeypatch.setattr(r, "zadd", real_zadd)
    assert await r.zscore(keys.ACTIVE_THREADS, str(t)) is None
    await d.flush_index()
    assert await r.zscore(keys.ACTIVE_THREADS, str(t)) is not None


async def test_held_messages_without_a_number_go_back_behind_the_running_turn(
    redis_clients: RedisClients,
) -> None:
    """Events forwarded into a conversation after a move carry no arrival number:
    a held one queued again went to the end, behind the same person's later
    message (found by review; the numbered case was fixed before).  Two held
    messages keep their order."""
    r = redis_clients.redis
    d = Delivery(r, redis_clients.blocking)
    await d.ensure_group()
    t = ThreadKey("web", "local", "keep0")
    for text in ("head", "later"):
        await d.handoff([(b"", dataclasses.replace(msg(t, text), seq=0))], "w")
    for text in ("held1~held", "held2~held"):
        await d.handoff([(b"", dataclasses.replace(msg(t, text), seq=0))], "w", behind=1)
    box = await r.lrange(keys.mailbox(t), 0, -1)
    assert [InboundEvent.from_json(x).event_id for x in box] == [
        "ehead",
        "eheld1~held",
        "eheld2~held",
        "elater",
    ]
