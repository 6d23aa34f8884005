"""How busy this process's event loop is, so a worker reads only what it can finish.

A worker that reads every message it is offered while its CPU is already saturated
does not answer faster: each turn it holds waits longer for its share of the loop,
its memory grows with the turns it holds (streamed LLM responses, buffers) and the
garbage collector gets busier, so it answers *fewer* turns per second.  Messages it
has not read stay in the Redis stream, where any other worker can take them.

:class:`LoopLag` measures the loop's lag (how late a short sleep wakes up): a few
milliseconds when the loop keeps up, tens to hundreds when it does not.  The worker
stops reading while the lag is above ``WORKER_BUSY_LAG_MS`` and it is running at least
one thread (so one slow callback cannot stall an idle worker), and resumes when the
lag is back under it.  The figure held is a peak that decays, so one quiet sample in
a busy stretch does not open the gate to a burst.

The gate only closes for a worker holding at least ``MIN_RUNNING`` threads: a lagging
loop with a handful of turns in hand is a slow or shared machine (CPU steal on a small
dyno), not a worker hoarding work, and holding back there would only make new
conversations wait for the ones in hand.
"""

from __future__ import annotations

import asyncio
import time

SAMPLE_SECS = 0.02  # how often the lag is sampled
MIN_RUNNING = 16  # threads in hand below which the gate stays open
DECAY = 0.7  # per sample: a 200 ms spike falls under 20 ms in ~7 samples (~0.15 s)


class LoopLag:
    """The event loop's lag in seconds (decaying peak of a short sleep's overshoot)."""

    def __init__(self, sample_secs: float = SAMPLE_SECS) -> None:
        self.sample_secs = sample_secs
        self.lag = 0.0

    def busy(self, limit_secs: float) -> bool:
        return limit_secs > 0 and self.lag > limit_secs

    async def run(self) -> None:
        # time.monotonic, not loop.time(): uvloop's counts whole milliseconds
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(self.sample_secs)
            late = max(time.monotonic() - t0 - self.sample_secs, 0.0)
            self.lag = max(late, self.lag * DECAY)
