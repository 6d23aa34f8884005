"""The bytes of people's attachments one process holds at once (``ATTACHMENT_MEMORY_BYTES``).

Photos (:mod:`~agent_core.agent.images`), text files and PDFs
(:mod:`~agent_core.agent.documents`) are downloaded whole into memory, each up to
its own cap; nothing else bounds how many are held at once across the turns a
worker runs together.  A :class:`DownloadBudget` does: a download *holds* its
bytes before it starts (the size the platform gave, else the per-file cap) and
gives them back once the bytes are no longer needed (a photo once it has been
prepared for the model, a text file once decoded, a PDF once read).  It is a
weighted semaphore:

* waiting downloads go first come, first served: one that would fit does not
  overtake an earlier, larger one, so a large file is never starved by small ones;
* a hold larger than the whole budget is cut to the budget, so a file of the
  per-file maximum always goes through, alone;
* a limit of 0 means no budget: every hold is granted at once.

The bytes are given back on every path (an error, a cancellation, the message's
deadline), and a hold cancelled while still waiting leaves the queue, letting
the next ones go.  One budget per process, held by the
:class:`~agent_core.agent.agent.Agent`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections import deque
from types import TracebackType
from typing import Any


class Hold:
    """One download's share of the budget: ``async with hold:`` waits for the bytes
    and gives them back at the end (or later, see :meth:`release_after`)."""

    def __init__(self, budget: DownloadBudget, nbytes: int) -> None:
        self.budget = budget
        self.nbytes = nbytes
        self.granted = False  # the bytes are counted as held
        self._waiter: asyncio.Future[None] | None = None
        self._deferred = False

    @property
    def waiting(self) -> bool:
        """Queued for bytes that other downloads hold."""
        return self._waiter is not None and not self._waiter.done()

    async def __aenter__(self) -> Hold:
        await self.budget._acquire(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._deferred:
            self.budget._give_back(self)

    def release_after(self, job: concurrent.futures.Future[Any]) -> None:
        """Give the bytes back when ``job`` (work on another thread that has the bytes)
        is done, instead of at the end of the ``async with``: a cancelled wait does not
        stop a job already running, and its bytes stay held until it ends."""
        self._deferred = True
        loop = asyncio.get_running_loop()

        def done(_: concurrent.futures.Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nothing waits any more
                loop.call_soon_threadsafe(self.budget._give_back, self)

        job.add_done_callback(done)


class DownloadBudget:
    """A weighted, first-come-first-served semaphore of bytes (0 = unlimited)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0  # bytes granted and not given back
        self._queue: deque[Hold] = deque()

    @property
    def queued(self) -> int:
        """Holds waiting for bytes."""
        return len(self._queue)

    def hold(self, nbytes: int) -> Hold:
        """A share of ``nbytes`` (cut to the whole budget), taken by ``async with``."""
        nbytes = max(0, nbytes)
        return Hold(self, min(nbytes, self.limit) if self.limit else nbytes)

    async def _acquire(self, h: Hold) -> None:
        if not self.limit or (not self._queue and self.held + h.nbytes <= self.limit):
            self._grant(h)
            return
        h._waiter = asyncio.get_running_loop().create_future()
        self._queue.append(h)
        try:
            await h._waiter
        except asyncio.CancelledError:
            if h.granted:  # granted, then cancelled before it could use the bytes
                self._give_back(h)
            elif h in self._queue:
                self._queue.remove(h)
                self._wake()  # it may have been the head that the others waited behind
            raise

    def _grant(self, h: Hold) -> None:
        h.granted = True
        self.held += h.nbytes

    def _give_back(self, h: Hold) -> None:
        if not h.granted:
            return
        h.granted = False
        self.held -= h.nbytes
        self._wake()

    def _wake(self) -> None:
        """Grant the waiting holds in order, as long as the first in line fits."""
        while self._queue:
            h = self._queue[0]
            assert h._waiter is not None
            if h._waiter.done():  # cancelled: its task takes it out of the queue
                self._queue.popleft()
                continue
            if self.held + h.nbytes > self.limit:
                return
            self._queue.popleft()
            self._grant(h)
            h._waiter.set_result(None)

    def __str__(self) -> str:
        return f"attachment memory ({self.held} of {self.limit} bytes held, {self.queued} waiting)"
