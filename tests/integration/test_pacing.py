"""agent_core.store.pacing: shared send slots on a real Valkey, on the server's clock."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent_core.store.pacing import Pacer, pace_key


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
