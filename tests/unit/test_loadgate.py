"""LoopLag: the event loop's lag, as the worker's read gate sees it."""

from __future__ import annotations

import asyncio
import time

from agent_core.loadgate import LoopLag


async def test_a_blocked_loop_shows_as_lag_that_then_decays() -> None:
    lag = LoopLag(sample_secs=0.01)
    task = asyncio.create_task(lag.run())
    try:
        await asyncio.sleep(0.1)
        assert lag.lag < 0.05, "an idle loop is not busy"
        assert not lag.busy(0.05)
        time.sleep(0.2)  # noqa: ASYNC251 -- on purpose: a callback that holds the loop 200 ms
        await asyncio.sleep(0.005)
        assert lag.lag >= 0.1
        assert lag.busy(0.05)
        await asyncio.sleep(0.5)  # the loop keeps up again
        assert not lag.busy(0.05)
    finally:
        task.cancel()


def test_a_zero_limit_turns_the_gate_off() -> None:
    lag = LoopLag()
    lag.lag = 10.0
    assert not lag.busy(0)
    assert lag.busy(1.0)
