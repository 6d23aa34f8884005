"""The inbox stream never drops what no worker has finished: past STREAM_MAXLEN new
events are refused (the platform retries), and only acknowledged entries are trimmed."""

from __future__ import annotations

import pytest

from agent_core.errors import StoreUnavailable
from agent_core.events import ThreadKey
from agent_core.ingest import Ingest, Submitted
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from tests.integration.agent.conftest import user_event


def _event(i: int) -> object:
    return user_event(ThreadKey("web", "local", f"c{i % 50}"), f"m{i}", eid=f"ev{i}")


async def test_a_backlog_beyond_stream_maxlen_is_refused_never_dropped(
    redis_clients: RedisClients,
) -> None:
    r = redis_clients.redis
    delivery = Delivery(r, redis_clients.blocking)
    await delivery.ensure_group()  # the workers ran before, then went down
    ingest = Ingest(r, stream_maxlen=1000)
    accepted, refused = [], []
    for i in range(1500):
        ev = _event(i)
        try:
            assert await ingest.submit(ev) == Submitted.ACCEPTED  # type: ignore[arg-type]
            accepted.append(f"ev{i}")
        except StoreUnavailable as exc:
            assert "inbox is full" in str(exc)
            refused.append(f"ev{i}")
    assert (len(accepted), len(refused)) == (1000, 500)
    assert refused[0] == "ev1000"
    # nothing was claimed for a refused event: the platform's retry gets in later
    assert await r.exists(keys.dedup("web", refused[0])) == 0
    read: list[str] = []
    while entries := await delivery.read("w1", count=100, block_ms=10):
        read += [ev.event_id for _eid, ev in entries if ev is not None]
    assert read == accepted  # every accepted event is delivered, in order
    # read but not acknowledged: still the workers' to finish, so still full
    assert await delivery.trim_acked() == 0
    with pytest.raises(StoreUnavailable):
        await ingest.submit(_event(1000))  # type: ignore[arg-type]
    ids = [eid for eid, _ in await delivery.read_own_pending("w1", count=1000)]
    await r.xack(keys.INBOX_STREAM, keys.INBOX_GROUP, *ids[:600])
    # the retry of a refused event gets in once the workers are done with some
    assert await ingest.submit(_event(1000)) == Submitted.ACCEPTED  # type: ignore[arg-type]
    assert await r.xlen(keys.INBOX_STREAM) == 401  # 400 unacknowledged + the new one


async def test_trim_keeps_everything_unread_or_unacknowledged(redis_clients: RedisClients) -> None:
    r = redis_clients.redis
    delivery = Delivery(r, redis_clients.blocking)
    await delivery.ensure_group()
    ingest = Ingest(r)
    for i in range(30):
        await ingest.submit(_event(i))  # type: ignore[arg-type]
    first = await delivery.read("w1", count=10, block_ms=10)  # 10 read, 20 unread
    await r.xack(keys.INBOX_STREAM, keys.INBOX_GROUP, *[eid for eid, _ in first[1:]])
    assert await delivery.trim_acked() == 0  # the oldest read one is still pending
    await r.xack(keys.INBOX_STREAM, keys.INBOX_GROUP, first[0][0])
    assert await delivery.trim_acked() == 10
    rest = await delivery.read("w1", count=100, block_ms=10)
    assert [ev.event_id for _eid, ev in rest if ev is not None] == [f"ev{i}" for i in range(10, 30)]


async def test_trim_after_an_entry_with_the_top_sequence_number(
    redis_clients: RedisClients,
) -> None:
    # an explicit id with the largest sequence: the next id cannot be written as
    # ms-(seq+1); the sweeper's trim (the first thing it does) must not fail on it
    r = redis_clients.redis
    delivery = Delivery(r, redis_clients.blocking)
    await delivery.ensure_group()
    await r.xadd(keys.INBOX_STREAM, {"e": "x"}, id="4-0")
    top = "5-18446744073709551615"
    await r.xadd(keys.INBOX_STREAM, {"e": "x"}, id=top)
    read = await r.xreadgroup(keys.INBOX_GROUP, "c", {keys.INBOX_STREAM: ">"})
    await r.xack(keys.INBOX_STREAM, keys.INBOX_GROUP, "4-0", top)
    assert len(read[0][1]) == 2
    assert await delivery.trim_acked() == 1  # the last delivered one is kept
