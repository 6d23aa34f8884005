"""Delivery invariants on a real Valkey: dedup, hand-off, ordering, recovery, no duplicates."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_core.agent.agent import Agent
from agent_core.errors import StoreUnavailable
from agent_core.events import EventKind, InboundEvent, MessageRef, ThreadKey
from agent_core.ingest import Ingest, Submitted
from agent_core.llm.base import Completion, CompletionRequest, ModelInfo, StreamItem, TextDelta
from agent_core.settings import CoreSettings
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from agent_core.worker import Worker
from tests.fakes.outbox import RecordingOutbox


def msg(thread: ThreadKey, n: int | str, text: str = "") -> InboundEvent:
    return InboundEvent(
        event_id=f"e{n}",
        kind=EventKind.MESSAGE,
        channel="web",
        thread=thread,
        user_id="u1",
        text=text or f"m{n}",
    )


class SlowEcho:
    """A provider that answers 'echo: <last user text>' after ``delay`` and records overlap."""

    def __init__(self, delay: float = 0.05) -> None:
        self.delay = delay
        self.active: dict[str, int] = {}
        self.max_overlap = 0
        self.seen: list[tuple[str, str]] = []
        self.block: asyncio.Event | None = None

    name = "slow-echo"

    async def initialize(self) -> None: ...

    async def shutdown(self) -> None: ...

    def model_info(self, model: str | None = None) -> ModelInfo:
        return ModelInfo("slow-echo")

    async def list_models(self) -> list[str]:
        return ["slow-echo"]

    async def complete(self, request: CompletionRequest) -> Completion:
        t = request.session_id
        self.active[t] = self.active.get(t, 0) + 1
        self.max_overlap = max(self.max_overlap, self.active[t])
        try:
            users = [m.content for m in request.messages if m.role == "user"]
            self.seen.append((t, users[-1]))
            if self.block is not None:
                await self.block.wait()
            await asyncio.sleep(self.delay)
            return Completion(text="echo: " + " + ".join(users[-1:]), model="slow-echo")
        finally:
            self.active[t] -= 1

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        c = await self.complete(request)
        yield TextDelta(c.text)
        yield c


def make_worker(
    clients: RedisClients, llm: Any, outbox: RecordingOutbox, name: str, **overrides: Any
) -> Worker:
    settings = CoreSettings(
        **{"sweep_interval_secs": 0.1, "reclaim_idle_secs": 0.3, "lock_ttl_secs": 2.0, **overrides}
    )
    delivery = Delivery(
        clients.redis, clients.blocking, lock_ttl_ms=int(settings.lock_ttl_secs * 1000)
    )
    agent = Agent(settings, llm, delivery, {"web": outbox})
    return Worker(settings, delivery, agent, name=name)


async def wait_for(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def test_ingest_dedups_on_event_id(redis: Any) -> None:
    ingest = Ingest(redis)
    t = ThreadKey("web", "local", "a")
    assert await ingest.submit(msg(t, 1)) == Submitted.ACCEPTED
    assert await ingest.submit(msg(t, 1)) == Submitted.DUPLICATE
    assert await redis.xlen(keys.INBOX_STREAM) == 1


async def test_a_failed_publish_claims_nothing(redis: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis fails mid-ingest: 5xx for the platform, and its retry gets through."""
    ingest = Ingest(redis)
    t = ThreadKey("web", "local", "a")

    async def broken(*a: Any, **k: Any) -> None:
        raise RedisConnectionError("down")

    with monkeypatch.context() as m:
        m.setattr("agent_core.ingest.run_script", broken)
        with pytest.raises(StoreUnavailable):
            await ingest.submit(msg(t, 1))
    assert await redis.exists(keys.dedup("web", "e1")) == 0
    assert await ingest.submit(msg(t, 1)) == Submitted.ACCEPTED
    assert await redis.xlen(keys.INBOX_STREAM) == 1


async def test_claim_and_publish_are_one_atomic_step(redis: Any) -> None:
    """A publish that fails inside the script leaves no claim behind."""
    ingest = Ingest(redis, stream_maxlen=1000)
    t = ThreadKey("web", "local", "a")
    await redis.set(keys.INBOX_STREAM, "not a stream")  # XADD fails with WRONGTYPE
    with pytest.raises(StoreUnavailable):
        await ingest.submit(msg(t, 7))
    assert await redis.exists(keys.dedup("web", "e7")) == 0
    await redis.delete(keys.INBOX_STREAM)
    assert await ingest.submit(msg(t, 7)) == Submitted.ACCEPTED


async def test_handoff_is_idempotent_and_takes_the_lock_once(redis_clients: RedisClients) -> None:
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    t = ThreadKey("web", "local", "a")
    ev = msg(t, 1)
    got = await d.handoff([(b"1-1", ev)], "w1")
    assert got == [t]
    got = await d.handoff([(b"1-2", ev)], "w2")  # redelivery of the same event
    assert got == []
    assert await redis_clients.redis.llen(keys.mailbox(t)) == 1


async def test_handoff_returns_the_state_a_turn_begins_from(redis_clients: RedisClients) -> None:
    """The hand-off script reads what ``begin`` would (one round trip less per turn),
    including later events of the same batch and earlier sent records."""
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    t, other = ThreadKey("web", "local", "a"), ThreadKey("web", "local", "b")
    await d.record_sent(t, "e0:0", MessageRef("web", "local", "m1"))
    got = await d.handoff_and_begin(
        [(b"1-1", msg(t, 1)), (b"1-2", msg(other, 2)), (b"1-3", msg(t, 3))], "w1"
    )
    assert [th for th, _ in got] == [t, other]
    state = dict(got)[t]
    assert [e.event_id for e in state.mailbox] == ["e1", "e3"]
    # the start records as the batch's first read found them (before it wrote its own)
    assert state.starts == {}
    again = await d.begin(t, "w1")
    assert again == dataclasses.replace(state, starts={"e1#s:0": "w1"})
    assert state.sent == {"e0:0": MessageRef("web", "local", "m1")}
    assert await d.handoff_and_begin([(b"1-4", msg(t, 4))], "w2") == []  # not its lock


async def test_a_turn_start_is_recorded_with_its_owner_and_goes_with_the_event(
    redis_clients: RedisClients,
) -> None:
    """The record a begin leaves (who began the head's turn) is what tells the next
    execution that an earlier one died; it must go when the event is consumed, and
    when its owner lets the thread go without running it (only its own record)."""
    r = redis_clients.redis
    d = Delivery(r, redis_clients.blocking)
    t = ThreadKey("web", "local", "a")

    async def records() -> dict[str, str]:
        raw = await r.hgetall(keys.sent(t))
        return {
            k.decode(): MessageRef.from_dict(orjson.loads(v)).message_id for k, v in raw.items()
        }

    await d.handoff_and_begin([(b"1-1", msg(t, 1)), (b"1-2", msg(t, 2))], "w1")
    # a MessageRef, as every version reads that hash (a rollback reads it as its own)
    assert await records() == {"e1#s:0": "started:w1"}
    # the owner lets it go (a shutdown): its record goes with the lock
    await d.release(t, "w1")
    assert await records() == {}
    assert await r.exists(keys.lock(t)) == 0
    # w2 begins, then dies; w3 finds w2's record
    assert await d.try_lock(t, "w2")
    assert (await d.begin(t, "w2")).starts == {}
    await r.delete(keys.lock(t))  # w2's lock expired
    assert await d.try_lock(t, "w3")
    state = await d.begin(t, "w3")
    assert state.starts == {"e1#s:0": "w2"}
    assert state.sent == {} and state.pending == {}  # a start is not a reply part
    # w2, late, cannot take w3's record away
    await d.release(t, "w2")
    assert await records() == {"e1#s:0": "started:w3"}
    # consuming the event drops its record; the next head's begin records its own
    left = await d.complete(
        t,
        "w3",
        consumed=state.mailbox[:1],
        session_json=None,
        version=state.session_version,
        sent_fields=[],
    )
    assert left == 1
    assert await records() == {}
    state = await d.begin(t, "w3")
    assert state.mailbox[0].event_id == "e2"
    assert await records() == {"e2#s:0": "started:w3"}
    assert (
        await d.complete(
            t, "w3", consumed=state.mailbox[:1], session_json=None, version=0, sent_fields=[]
        )
        == 0
    )
    assert await r.exists(keys.sent(t)) == 0


async def test_a_hand_off_to_a_lock_already_ours_starts_the_thread(
    redis_clients: RedisClients,
) -> None:
    """A hand-off whose threads were lost before they started (its XACK failed) is
    replayed: the lock is this worker's already.  The thread is returned, marked, so a
    worker not running it starts it instead of leaving it locked until the lock
    expires (and another worker takes this worker's start record for a dead one)."""
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    t = ThreadKey("web", "local", "a")
    [(got, first)] = await d.handoff_and_begin([(b"1-1", msg(t, 1))], "w1")
    assert got == t and not first.lock_was_ours
    [(again, replay)] = await d.handoff_and_begin([(b"1-1", msg(t, 1))], "w1")
    assert again == t and replay.lock_was_ours
    assert replay.starts == {"e1#s:0": "w1"}  # its own: not an earlier execution
    assert await d.handoff_and_begin([(b"1-2", msg(t, 2))], "w2") == []


async def test_an_emptied_thread_leaves_the_index_in_the_next_round_trip(
    redis_clients: RedisClients,
) -> None:
    """A thread whose completion emptied its mailbox leaves the active index inside the
    next completion or hand-off this process sends (no round trip of its own); one whose
    mailbox refilled meanwhile goes back in; one handed off again never leaves."""
    r = redis_clients.redis
    d = Delivery(r, redis_clients.blocking)
    other_process = Delivery(r, redis_clients.blocking)
    t, u = ThreadKey("web", "local", "a"), ThreadKey("web", "local", "b")

    async def indexed(thread: ThreadKey) -> bool:
        return await r.zscore(keys.ACTIVE_THREADS, str(thread)) is not None

    async def finish(thread: ThreadKey) -> int:
        return await d.complete(
            thread,
            "w1",
            consumed=await d.peek(thread, 0),
            session_json=None,
            version=0,
            sent_fields=[],
        )

    await d.handoff([(b"1-1", msg(t, 1))], "w1")
    assert await finish(t) == 0
    d.leave_index_later(t)
    assert await indexed(t)  # until the next round trip
    await d.handoff([(b"1-2", msg(u, 2))], "w1")  # it rides in this one
    assert not await indexed(t) and await indexed(u)
    assert await finish(u) == 0
    d.leave_index_later(u)

    # u's mailbox refills (another process's hand-off) before the removal goes out
    await other_process.handoff([(b"1-3", msg(u, 3))], "w2")
    await d.flush_index()
    assert await indexed(u)
    assert await r.llen(keys.mailbox(u)) == 1

    # handed off again by this process: it stays indexed
    await d.handoff([(b"1-4", msg(t, 4))], "w1")
    assert await finish(t) == 0
    d.leave_index_later(t)
    await d.handoff([(b"1-5", msg(t, 5))], "w1")
    assert not d.leaving_index(t)
    await d.flush_index()
    assert await indexed(t)


async def test_a_removal_whose_round_trip_fails_is_sent_again(
    redis_clients: RedisClients,
) -> None:
    """The removal rides in another thread's completion; when that round trip fails
    (here the completion script is refused: its session key is not a hash), the
    removal is sent again with the next one (it may have run: ZREM + LLEN again is
    harmless, and puts back a thread whose mailbox refilled)."""
    r = redis_clients.redis
    d = Delivery(r, redis_clients.blocking)
    t, u = ThreadKey("web", "local", "a"), ThreadKey("web", "local", "b")
    await d.handoff([(b"1-1", msg(t, 1)), (b"1-2", msg(u, 2))], "w1")
    assert (
        await d.complete(
            t, "w1", consumed=[msg(t, 1)], session_json=None, version=0, sent_fields=[]
        )
        == 0
    )
    d.leave_index_later(t)
    await r.set(keys.session(u), "not a hash")
    with pytest.raises(Exception, match="WRONGTYPE"):
        await d.complete(
            u, "w1", consumed=[msg(u, 2)], session_json=b"{}", version=0, sent_fields=[]
        )
    assert d.leaving_index(t)
    await d.flush_index()
    assert await r.zscore(keys.ACTIVE_THREADS, str(t)) is None
    assert await r.zscore(keys.ACTIVE_THREADS, str(u)) is not None  # its event waits


async def test_an_arrival_during_a_turn_is_answered_when_an_index_write_fails(
    redis_clients: RedisClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message that arrives while the first turn runs (not taken into it) keeps its
    thread in the active index: the completion leaves events, so nothing takes the
    thread out, and a failing index write (a connection reset) cannot strand it."""
    r = redis_clients.redis
    outbox = RecordingOutbox()
    w = make_worker(redis_clients, SlowEcho(0.0), outbox, "w1")
    t = ThreadKey("web", "local", "arrival")
    real_complete = w.delivery.complete
    real_zadd = r.zadd
    failed: list[bool] = []

    async def zadd(*args: Any, **kw: Any) -> Any:
        if not failed:
            failed.append(True)
            raise RedisConnectionError("connection reset")
        return await real_zadd(*args, **kw)

    async def complete(thread: ThreadKey, owner: str, **kw: Any) -> int:
        if not failed:
            # e2 arrives after the turn's last look at the mailbox (another worker's hand-off)
            await Delivery(r, redis_clients.blocking).handoff(
                [(b"9-2", msg(t, 2, "second"))], "other"
            )
            monkeypatch.setattr(r, "zadd", zadd)
        return await real_complete(thread, owner, **kw)

    monkeypatch.setattr(w.delivery, "complete", complete)
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    try:
        await Ingest(r).submit(msg(t, 1, "first"))
        await wait_for(lambda: "echo: second" in outbox.final_texts(str(t)), 10)
    finally:
        stop.set()
        await task
    assert outbox.final_texts(str(t)) == ["echo: first", "echo: second"]


async def test_one_turn_at_a_time_per_thread_in_arrival_order(redis_clients: RedisClients) -> None:
    llm = SlowEcho(0.02)
    outbox = RecordingOutbox()
    workers = [make_worker(redis_clients, llm, outbox, f"w{i}") for i in range(3)]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(w.run(stop)) for w in workers]
    ingest = Ingest(redis_clients.redis)
    threads = [ThreadKey("web", "local", f"c{i}") for i in range(5)]
    for n in range(10):
        for t in threads:
            await ingest.submit(msg(t, f"{t.conversation}-{n}", f"{t.conversation} #{n}"))
    await wait_for(
        lambda: (
            sum(len(outbox.final_texts(str(t))) for t in threads) >= 1
            and all(_covered(llm, str(t), t.conversation) for t in threads)
        ),
        30,
    )
    stop.set()
    await asyncio.gather(*tasks)
    assert llm.max_overlap == 1, "two turns of one thread ran at the same time"
    for t in threads:
        order = [int(u.split("#")[-1]) for tk, u in llm.seen if tk == str(t)]
        # every message reached the model (directly or injected), in order
        assert order == sorted(order)
        history = " ".join(u for tk, u in llm.seen if tk == str(t))
        assert f"{t.conversation} #9" in history
    assert await redis_clients.redis.zcard(keys.ACTIVE_THREADS) == 0
    assert await Delivery(redis_clients.redis, redis_clients.blocking).pending_count() == 0


def _covered(llm: SlowEcho, thread: str, conv: str) -> bool:
    return any(tk == thread and u.endswith(f"{conv} #9") for tk, u in llm.seen)


async def test_a_dead_workers_thread_is_picked_up_without_duplicate_reply(
    redis_clients: RedisClients,
) -> None:
    """Worker A sends the reply then dies before completing; B reruns and edits, not resends."""
    llm = SlowEcho(0.0)
    llm.block = None
    outbox = RecordingOutbox()
    sent = asyncio.Event()
    outbox.on_send = sent
    a = make_worker(redis_clients, llm, outbox, "A", lock_ttl_secs=1.0)
    # A dies right after its first send: block its completion forever
    original_complete = a.delivery.complete

    async def never_complete(*args: Any, **kw: Any) -> int:
        await asyncio.Event().wait()
        return await original_complete(*args, **kw)

    a.delivery.complete = never_complete  # type: ignore[method-assign]
    stop_a = asyncio.Event()
    task_a = asyncio.create_task(a.run(stop_a))
    t = ThreadKey("web", "local", "crash")
    await Ingest(redis_clients.redis).submit(msg(t, 1, "hello"))
    await asyncio.wait_for(sent.wait(), 10)
    # SIGKILL-like death: the task vanishes without releasing anything
    threads = list(a.running.values())
    for th in threads:
        th.cancel()
    task_a.cancel()
    await asyncio.gather(task_a, *threads, return_exceptions=True)
    await redis_clients.redis.set(keys.lock(t), "A", px=500)  # the dead worker's lock, expiring

    b = make_worker(redis_clients, llm, outbox, "B")
    stop_b = asyncio.Event()
    task_b = asyncio.create_task(b.run(stop_b))
    await wait_for(lambda: b.turns_done >= 1)
    stop_b.set()
    await task_b
    assert len(outbox.sends(str(t))) == 1, "the rerun sent a second message"
    assert outbox.final_texts(str(t)) == ["echo: hello"]
    assert await redis_clients.redis.llen(keys.mailbox(t)) == 0


async def test_entries_of_a_dead_consumer_are_reclaimed(redis_clients: RedisClients) -> None:
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    await d.ensure_group()
    t = ThreadKey("web", "local", "orphan")
    await Ingest(redis_clients.redis).submit(msg(t, 1, "are you there"))
    taken = await d.read("dead-consumer", count=10, block_ms=100)  # read, never handed off
    assert len(taken) == 1
    outbox = RecordingOutbox()
    w = make_worker(redis_clients, SlowEcho(0.0), outbox, "rescuer")
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    await wait_for(lambda: w.turns_done >= 1)
    stop.set()
    await task
    assert w.reclaimed == 1
    assert outbox.final_texts(str(t)) == ["echo: are you there"]
    assert await d.pending_count() == 0


async def test_scripts_are_reloaded_after_the_server_forgot_them(
    redis_clients: RedisClients,
) -> None:
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    t = ThreadKey("web", "local", "flushed")
    await redis_clients.redis.script_flush()  # as after a Redis restart without persistence
    assert await d.handoff([(b"1-1", msg(t, 1))], "w1") == [t]
    assert await d.renew([t], "w1") == [True]


async def test_a_thread_waits_for_an_earlier_arrival_but_not_forever(
    redis_clients: RedisClients,
) -> None:
    """B arrived after A; A's entry vanished (read and lost): B runs once the gap
    wait is over, and A, should it turn up later, is answered after B."""
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    await d.ensure_group()
    t = ThreadKey("web", "local", "gap")
    ingest = Ingest(redis_clients.redis)
    await ingest.submit(msg(t, 1, "first"))
    lost = await d.read("ghost", count=10, block_ms=100)  # A: read, never handed off
    await redis_clients.redis.xack(keys.INBOX_STREAM, keys.INBOX_GROUP, lost[0][0])  # and gone
    await ingest.submit(msg(t, 2, "second"))
    outbox = RecordingOutbox()
    w = make_worker(redis_clients, SlowEcho(0.0), outbox, "w", reclaim_idle_secs=0.2)
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    started = time.monotonic()
    await wait_for(lambda: w.turns_done >= 1)
    assert time.monotonic() - started >= w.gap_wait * 0.5  # it did wait for A first
    assert outbox.final_texts(str(t)) == ["echo: second"]
    # A turns up late (e.g. reclaimed): answered after B, not lost
    late = lost[0][1]
    assert late is not None
    await d.handoff([(b"9-9", late)], "w")
    w._spawn(t)
    await wait_for(lambda: w.turns_done >= 2)
    stop.set()
    await task
    assert outbox.final_texts(str(t)) == ["echo: second", "echo: first"]


async def test_arrival_numbers_follow_ingest_order(redis: Any) -> None:
    ingest = Ingest(redis)
    t = ThreadKey("web", "local", "n")
    for i in range(3):
        await ingest.submit(msg(t, i))
    await ingest.submit(msg(t, 1))  # a duplicate gets no number
    entries = await redis.xrange(keys.INBOX_STREAM)
    assert [int(f[b"s"]) for _, f in entries] == [1, 2, 3]


async def test_a_worker_loop_that_dies_stops_the_worker_loudly(
    redis_clients: RedisClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the consume loop must not leave a process that looks alive and
    reads nothing (found by the Valkey-restart fault test): Worker.run raises."""
    from agent_core.worker import WorkerLoopDied

    worker = make_worker(redis_clients, SlowEcho(0.0), RecordingOutbox(), "w-dies")

    async def broken(*a: Any, **k: Any) -> Any:
        raise ValueError("a bug")

    monkeypatch.setattr(worker.delivery, "read", broken)
    stop = asyncio.Event()
    with pytest.raises(WorkerLoopDied, match="consume loop ended: ValueError"):
        await asyncio.wait_for(worker.run(stop), 10)
    assert not worker.ready


async def test_a_busy_worker_leaves_new_messages_in_the_stream_for_another(
    redis_clients: RedisClients,
) -> None:
    """While its event loop lags (CPU saturated), a worker that is running turns reads
    nothing new: the messages wait in the stream and another worker answers them."""
    llm = SlowEcho(0.0)
    llm.block = asyncio.Event()
    outbox = RecordingOutbox()
    busy = make_worker(redis_clients, llm, outbox, "w-busy")
    busy.busy_min_running = 1  # one thread in hand is enough to hold back here
    stop = asyncio.Event()
    tasks = [asyncio.create_task(busy.run(stop))]
    ingest = Ingest(redis_clients.redis)
    first = ThreadKey("web", "local", "first")
    await ingest.submit(msg(first, 1, "hold on"))
    await wait_for(lambda: len(llm.seen) == 1)  # w-busy is running one turn
    busy.loop_lag.lag = 1.0  # as if its loop ran 1 s late
    busy.loop_lag.sample_secs = 3600.0  # and stayed so (no new sample lowers it)
    await wait_for(lambda: busy.busy_pauses > 0)  # a read already waiting has returned
    others = [ThreadKey("web", "local", f"o{i}") for i in range(3)]
    for i, t in enumerate(others):
        await ingest.submit(msg(t, f"o{i}", f"question {i}"))
    await asyncio.sleep(0.5)
    assert len(llm.seen) == 1, "the busy worker read new messages"
    helper = make_worker(redis_clients, llm, outbox, "w-helper")
    tasks.append(asyncio.create_task(helper.run(stop)))
    await wait_for(lambda: len(llm.seen) == 4)  # the helper took all three
    llm.block.set()
    await wait_for(lambda: all(outbox.final_texts(str(t)) for t in [first, *others]))
    stop.set()
    await asyncio.gather(*tasks)
    assert helper.turns_done == 3 and busy.turns_done == 1


async def test_an_idle_worker_reads_however_late_its_loop_runs(
    redis_clients: RedisClients,
) -> None:
    """The gate only holds back a worker that has turns to finish (progress)."""
    outbox = RecordingOutbox()
    worker = make_worker(redis_clients, SlowEcho(0.0), outbox, "w-idle")
    worker.loop_lag.lag = 1.0
    worker.loop_lag.sample_secs = 3600.0
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    t = ThreadKey("web", "local", "a")
    await Ingest(redis_clients.redis).submit(msg(t, 1, "hi"))
    await wait_for(lambda: outbox.final_texts(str(t)))
    stop.set()
    await task


async def test_a_failed_acknowledgement_while_the_gate_is_closed_is_retried_later(
    redis_clients: RedisClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate closes right after a read (a busy loop); the acknowledgement it sends
    then meets a Redis error: the worker keeps going and acknowledges with its next read."""
    llm = SlowEcho(0.0)
    llm.block = asyncio.Event()
    outbox = RecordingOutbox()
    worker = make_worker(redis_clients, llm, outbox, "w-ack")
    worker.busy_min_running = 1
    worker.loop_lag.lag = 1.0
    worker.loop_lag.sample_secs = 3600.0
    failures = 0
    real_ack = worker.delivery.acknowledge

    async def flaky_ack(entries: Any) -> None:
        nonlocal failures
        failures += 1
        raise RedisConnectionError("connection reset")

    monkeypatch.setattr(worker.delivery, "acknowledge", flaky_ack)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    t = ThreadKey("web", "local", "a")
    await Ingest(redis_clients.redis).submit(msg(t, 1, "hi"))
    await wait_for(lambda: len(llm.seen) == 1 and failures >= 3)
    assert not task.done(), "the consume loop died on a Redis error"
    monkeypatch.setattr(worker.delivery, "acknowledge", real_ack)
    llm.block.set()
    await wait_for(lambda: outbox.final_texts(str(t)))
    d = Delivery(redis_clients.redis, redis_clients.blocking)
    await wait_for(lambda: worker.turns_done == 1)
    stop.set()
    await task
    assert await d.pending_count() == 0  # acknowledged after all


async def test_a_lagging_worker_with_few_turns_in_hand_keeps_reading(
    redis_clients: RedisClients,
) -> None:
    """A late loop with fewer than MIN_RUNNING threads is a slow machine, not a
    hoarding worker: new conversations still start."""
    llm = SlowEcho(0.0)
    llm.block = asyncio.Event()
    outbox = RecordingOutbox()
    worker = make_worker(redis_clients, llm, outbox, "w-slowbox")
    worker.loop_lag.lag = 1.0
    worker.loop_lag.sample_secs = 3600.0
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    ingest = Ingest(redis_clients.redis)
    threads = [ThreadKey("web", "local", f"s{i}") for i in range(3)]
    for i, t in enumerate(threads):
        await ingest.submit(msg(t, f"s{i}", f"q{i}"))
        await wait_for(lambda i=i: len(llm.seen) == i + 1)  # each starts while others run
    assert worker.busy_pauses == 0
    llm.block.set()
    await wait_for(lambda: all(outbox.final_texts(str(t)) for t in threads))
    stop.set()
    await task
