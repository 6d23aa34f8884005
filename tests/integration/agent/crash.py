"""A worker that dies before completing its turn, like a SIGKILL (it saves and
releases nothing), and its replacement, for the rerun tests."""

from __future__ import annotations

import asyncio
from typing import Any


def die_before_completion(w: Any) -> asyncio.Event:
    """The world's first worker never completes a turn nor releases its thread; the
    event is set when a turn reaches its completion (everything before it was done)."""
    worker = w.workers[0][0]
    reached = asyncio.Event()

    async def never(*a: Any, **k: Any) -> int:
        reached.set()
        await asyncio.Event().wait()
        return 0

    async def nothing(*a: Any, **k: Any) -> None:
        return None

    worker.delivery.complete = never
    worker.delivery.release = nothing
    return reached


async def replace_worker(w: Any) -> None:
    """Kill the world's worker and start a new one, which reruns the dead one's turn
    once its lock expires."""
    worker, _stop, task = w.workers[0]
    for th in list(worker.running.values()):
        th.cancel()
    task.cancel()
    await asyncio.gather(task, *worker.running.values(), return_exceptions=True)
    w.workers.clear()
    await w.start()
