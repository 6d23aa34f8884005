"""agent_core.store.pacing: shared send slots on a real Valkey, on the server's clock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from agent_core.events import MessageRef, ThreadKey
from agent_core.outbox import (
    WireClaim,
    on_wire,
    reset_on_wire,
    set_on_wire,
    wire_claim,
    wire_created,
    wire_retry,
)
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery, claim_stamp
from agent_core.store.pacing import Pacer, pace_key
from agent_core.store.scripting import run_script


async def test_slots_on_one_pace_are_an_interval_apart(redis: Any) -> None:
    pacer = Pacer(redis)
    key = pace_key("t", "chat", "1")
    waits = [await pacer.reserve([(key, 0.2)]) for _ in range(3)]
    assert waits[0] == 0
    assert waits[1] == pytest.approx(0.2, abs=0.03)
    assert waits[2] == pytest.approx(0.4, abs=0.03)


async def test_a_droppable_call_books_nothing_when_its_slot_is_too_far(redis: Any) -> None:
    pacer = Pacer(redis)
    key = pace_key("t", "chat", "2")
    assert await pacer.reserve([(key, 0.5)]) == 0
    assert await pacer.reserve([(key, 0.5)], max_wait=0.1) is None
    # the refused call took no slot: the next one is still half a second away
    assert await pacer.reserve([(key, 0.5)]) == pytest.approx(0.5, abs=0.05)


async def test_a_pause_holds_every_caller_until_it_ends(redis: Any) -> None:
    pacer = Pacer(redis)
    key = pace_key("t", "chat", "3")
    await pacer.pause(key, 0.6)
    wait = await pacer.reserve([(key, 0.0)])
    assert wait == pytest.approx(0.6, abs=0.05)
    # a shorter pause never shortens a longer one
    await pacer.pause(key, 0.1)
    assert await pacer.reserve([(key, 0.0)]) == pytest.approx(0.6, abs=0.06)


async def test_a_worker_whose_clock_runs_ahead_does_not_hold_back_the_others(
    redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers on machines whose clocks differ by 5 s book the same chat: the
    second waits one interval, not the 5 s between their clocks (slots are kept
    on the server's clock)."""
    key = pace_key("t", "chat", "4")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 5.0)
    assert await Pacer(redis).reserve([(key, 0.2)]) == 0
    monkeypatch.setattr(time, "time", real)
    assert await Pacer(redis).reserve([(key, 0.2)]) == pytest.approx(0.2, abs=0.03)


async def test_a_slot_booked_long_ago_costs_no_wait(redis: Any) -> None:
    pacer = Pacer(redis)
    key = pace_key("t", "chat", "5")
    assert await pacer.reserve([(key, 0.1)]) == 0
    await asyncio.sleep(0.15)
    assert await pacer.reserve([(key, 0.1)]) == 0


# --- the agent's part claim in the booking's round trip ------------------------------


class _Claims:
    """A thread whose lock ``owner`` holds, its claim calls, and the hook's calls."""

    def __init__(self, clients: RedisClients, owner: str = "w1") -> None:
        self.delivery = Delivery(clients.redis, clients.blocking)
        self.thread = ThreadKey("telegram", "bot", "42")
        self.owner = owner
        self.hook_calls = 0
        self.settled: list[tuple[int, MessageRef | None]] = []
        self.release_fails = ""  # "before" / "after": the take-back's round trip fails

    async def hold_lock(self, redis: Any) -> None:
        await redis.set(keys.lock(self.thread), self.owner)

    def claim(self, field: str, stamp: str | None = None) -> WireClaim:
        call, marker = self.delivery.claim_call(self.thread, self.owner, field, stamp=stamp)

        def settle(raw: Any) -> None:
            code, ref = self.delivery.claim_result(raw)
            self.settled.append((code, ref))
            if code != 0:
                raise RuntimeError(f"claim refused: {code}")

        async def release() -> None:
            if self.release_fails == "before":
                raise RedisConnectionError("gone")
            await self.delivery.unclaim_part(self.thread, field, marker)
            if self.release_fails == "after":
                raise RedisConnectionError("reply lost")

        return WireClaim(call, settle, release)

    @contextlib.contextmanager
    def hooked(self, field: str) -> Iterator[None]:
        """The wire hook armed as ReplyWriter arms it (the early claim, and a
        callback that claims again after a wait, with the same marker)."""
        token = self._hook(field)
        try:
            yield
        finally:
            reset_on_wire(token)

    def _hook(self, field: str) -> object:
        stamp = claim_stamp()

        async def callback() -> None:
            self.hook_calls += 1
            code, ref = await self.delivery.claim_part(self.thread, self.owner, field, stamp=stamp)
            self.settled.append((code, ref))

        return set_on_wire(callback, self.claim(field, stamp))

    async def record(self, redis: Any, field: str) -> bytes | None:
        got: bytes | None = await redis.hget(keys.sent(self.thread), field)
        return got


async def test_with_no_wait_due_the_claim_is_made_in_the_booking_round_trip(
    redis: Any, redis_clients: RedisClients
) -> None:
    c = _Claims(redis_clients)
    await c.hold_lock(redis)
    with c.hooked("e1:0"):
        assert await Pacer(redis).reserve([(pace_key("t", "c", "9"), 1.0)], claim=wire_claim()) == 0
        assert (await c.record(redis, "e1:0") or b"").startswith(b"pending:")
        assert c.settled == [(0, None)]
        await on_wire()  # already claimed: the hook does nothing
        assert c.hook_calls == 0


async def test_with_a_wait_due_the_claim_is_taken_back_and_made_after_the_wait(
    redis: Any, redis_clients: RedisClients
) -> None:
    """A part is claimed only once its pacing wait is over: a crash during the
    wait must leave it unclaimed (sent by the rerun), not 'maybe sent'."""
    c = _Claims(redis_clients)
    await c.hold_lock(redis)
    pacer = Pacer(redis)
    key = pace_key("t", "c", "10")
    assert await pacer.reserve([(key, 1.0)]) == 0  # the chat's slot is taken
    with c.hooked("e1:0"):
        wait = await pacer.reserve([(key, 1.0)], claim=wire_claim())
        assert wait == pytest.approx(1.0, abs=0.05)
        assert await c.record(redis, "e1:0") is None  # taken back
        await on_wire()  # after the wait: the hook claims
        assert c.hook_calls == 1
        assert (await c.record(redis, "e1:0") or b"").startswith(b"pending:")


async def test_a_refused_claim_raises_at_once_even_with_a_wait_due(
    redis: Any, redis_clients: RedisClients
) -> None:
    c = _Claims(redis_clients)
    await c.hold_lock(redis)
    sent = orjson.dumps(MessageRef("telegram", "42", "7").to_dict())
    await redis.hset(keys.sent(c.thread), "e1:0", sent)  # sent before
    pacer = Pacer(redis)
    key = pace_key("t", "c", "11")
    await pacer.reserve([(key, 5.0)])
    with c.hooked("e1:0"):
        with pytest.raises(RuntimeError, match="refused: 1"):
            await pacer.reserve([(key, 5.0)], claim=wire_claim())
        assert await c.record(redis, "e1:0") == sent  # untouched
        assert c.settled == [(1, MessageRef("telegram", "42", "7"))]
        await redis.set(keys.lock(c.thread), "someone-else")
        with pytest.raises(RuntimeError, match="refused: -1"):
            await pacer.reserve([(key, 5.0)], claim=c.claim("e1:1"))


@pytest.mark.parametrize("fails", ["before", "after"])
async def test_a_claim_whose_take_back_failed_is_made_again_after_the_wait(
    redis: Any, redis_clients: RedisClients, fails: str
) -> None:
    """Taking the early claim back failed (before the script ran, or with its reply
    lost after): after the wait the hook claims again, checking the lock, and
    finds either nothing or this send's own claim, which it keeps."""
    c = _Claims(redis_clients)
    await c.hold_lock(redis)
    pacer = Pacer(redis)
    key = pace_key("t", "c", "12")
    await pacer.reserve([(key, 1.0)])
    c.release_fails = fails
    with c.hooked("e1:0"):
        assert await pacer.reserve([(key, 1.0)], claim=wire_claim()) == pytest.approx(1, abs=0.05)
        early = await c.record(redis, "e1:0")
        assert (early is None) if fails == "after" else (early or b"").startswith(b"pending:")
        await on_wire()
        assert c.hook_calls == 1
        assert c.settled == [(0, None)]  # claimed: the part goes out, once
        assert (await c.record(redis, "e1:0") or b"").startswith(b"pending:")


async def test_another_executions_claim_is_not_taken_for_this_ones(
    redis: Any, redis_clients: RedisClients
) -> None:
    """Only the very marker of this send counts as its own: a claim an earlier
    execution left (another time) is reported as being sent elsewhere."""
    c = _Claims(redis_clients)
    await c.hold_lock(redis)
    mine, theirs = claim_stamp(), claim_stamp()
    assert mine != theirs
    assert await c.delivery.claim_part(c.thread, c.owner, "e1:0", stamp=mine) == (0, None)
    assert await c.delivery.claim_part(c.thread, c.owner, "e1:0", stamp=mine) == (0, None)
    assert await c.delivery.claim_part(c.thread, c.owner, "e1:0", stamp=theirs) == (2, None)
    assert not await c.delivery.unclaim_part(c.thread, "e1:0", f"pending:{theirs}")
    assert await c.delivery.unclaim_part(c.thread, "e1:0", f"pending:{mine}")
    assert await c.record(redis, "e1:0") is None


async def test_a_claim_replaces_exactly_the_dead_claim_it_names(
    redis: Any, redis_clients: RedisClients
) -> None:
    """A part looked up on the platform and found missing is claimed over the dead
    execution's marker, and only over that one (another claim made meanwhile, or a
    record, is reported as ever)."""
    c = _Claims(redis_clients)
    await c.hold_lock(redis)
    dead, mine, other = claim_stamp(), claim_stamp(), claim_stamp()
    await redis.hset(keys.sent(c.thread), "e1:0", f"pending:{dead}")

    async def claim(stamp: str, replace: str) -> tuple[int, object]:
        call, _ = c.delivery.claim_call(c.thread, c.owner, "e1:0", stamp=stamp, replace=replace)
        return c.delivery.claim_result(await run_script(redis, *call))

    assert await claim(mine, f"pending:{other}") == (2, None)  # not the marker it names
    assert await claim(mine, f"pending:{dead}") == (0, None)
    assert await c.record(redis, "e1:0") == f"pending:{mine}".encode()
    assert await claim(other, f"pending:{dead}") == (2, None)  # the dead one is gone


async def test_a_pace_that_fails_takes_the_claim_made_with_it_back(
    redis: Any, redis_clients: RedisClients
) -> None:
    """The booking's round trip failed (a refused pace script) after the claim in it
    was made: the claim is taken back, so a rerun sends the part instead of
    taking it for 'maybe sent'."""
    c = _Claims(redis_clients)
    await c.hold_lock(redis)
    key = pace_key("t", "c", "13")
    await redis.hset(key, "not", "a pace")  # the PACE script fails on it (WRONGTYPE)
    with c.hooked("e1:0"):
        with pytest.raises(ResponseError):
            await Pacer(redis).reserve([(key, 1.0)], claim=wire_claim())
        assert await c.record(redis, "e1:0") is None


async def test_a_retry_whose_take_back_failed_still_claims_again_before_it_goes(
    redis: Any, redis_clients: RedisClients
) -> None:
    """wire_retry: the take-back's reply was lost (it ran) and the lock moved on
    during the wait: the next attempt claims again, and that claim finds the lock
    lost instead of the request going out unclaimed."""
    c = _Claims(redis_clients)
    await c.hold_lock(redis)
    with c.hooked("e1:0"):
        await on_wire()  # claimed; the request then got a 429
        c.release_fails = "after"
        with pytest.raises(RedisConnectionError):
            await wire_retry()
        assert await c.record(redis, "e1:0") is None
        assert wire_claim() is not None  # armed again
        await redis.set(keys.lock(c.thread), "someone-else")
        await on_wire()
        assert c.settled == [(0, None), (-1, None)]


async def test_a_part_partly_on_screen_keeps_its_claim_through_a_retry(
    redis: Any, redis_clients: RedisClients
) -> None:
    c = _Claims(redis_clients)
    await c.hold_lock(redis)
    with c.hooked("e1:0"):
        await on_wire()
        wire_created()  # the first of the part's messages went out
        await wire_retry()  # the second got a 429
        assert (await c.record(redis, "e1:0") or b"").startswith(b"pending:")
        assert wire_claim() is None
