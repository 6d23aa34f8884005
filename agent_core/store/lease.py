"""A Redis lease: exactly one holder among all processes, taken over when it dies.

Used for the gateway connections (one Discord shard set, one Telegram poller) and
the scheduler.  The holder renews every ttl/3 with its owner token (compare and
PEXPIRE in Lua); a holder that cannot renew (Redis gone, lease taken) learns it
through :attr:`Lease.lost` and must stop what the lease protects.

The holder counts the lease from when it *sent* the SET / renewal (Redis starts the
TTL later, when it runs it), and every renewal must answer before that count runs
out less a margin (ttl/5) left for stopping the connection: a Redis that stalls
(a partition, no error, no answer; the client has no read timeout) sets ``lost``
before the key can expire and another process take it, never after.

A process paused longer than that (a long GC pause, a frozen VM, SIGSTOP) resumes
with its timers overdue, and its gateway's short sleeps may run before the keeper's
renewal can answer: :meth:`Lease.valid` says, without Redis, whether the hold is
still surely ours, and :func:`run_under_lease` hands the run a :class:`LeaseStop`
whose ``is_set()`` is also true once it is not, so the gateway stops before its
next step (a getUpdates, submitting an event) instead of acting beside the new
holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.store import keys, scripts

log = logging.getLogger(__name__)


class Lease:
    def __init__(self, redis: Redis, name: str, owner: str, *, ttl: float = 15.0) -> None:
        self.redis = redis
        self.name = name
        self.key = keys.lease(name)
        self.owner = owner
        self.ttl_ms = int(ttl * 1000)
        self.lost = asyncio.Event()
        self._renew = redis.register_script(scripts.RENEW)
        self._release = redis.register_script(scripts.RELEASE)
        self._task: asyncio.Task[None] | None = None
        self._valid_until = 0.0  # loop time by which our hold surely ended, if not renewed

    async def try_acquire(self) -> bool:
        sent = asyncio.get_running_loop().time()
        if await self.redis.set(self.key, self.owner, nx=True, px=self.ttl_ms):
            self._valid_until = sent + self.ttl_ms / 1000
            return True
        return False

    async def holder(self) -> str | None:
        raw = await self.redis.get(self.key)
        if raw is None:
            return None
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def valid(self) -> bool:
        """Whether the lease is still surely ours: before the time by which it would
        have expired had no renewal answered, less :attr:`margin`.  No Redis call:
        what a gateway checks before each step, as a process resuming from a pause
        longer than its hold must not act before its keeper has noticed."""
        return asyncio.get_running_loop().time() < self._valid_until - self.margin

    @property
    def margin(self) -> float:
        """Seconds between :attr:`lost` being set and the earliest moment another
        process can take the lease: TTL/5 (3 s for 15 s)."""
        return self.ttl_ms / 5000

    @property
    def poll_interval(self) -> float:
        """Seconds between a standby's looks: TTL/15 (1 s for the gateway's 15 s)."""
        return self.ttl_ms / 15000

    async def acquire(self, stop: asyncio.Event, *, poll: float | None = None) -> bool:
        """Wait until the lease is ours (True) or ``stop`` is set (False).  Looks every
        TTL/15 (1 s for 15 s; one SET NX): a dead holder's lease is taken within
        TTL + TTL/15 of its last renewal, a released one within TTL/15."""
        interval = poll if poll is not None else self.poll_interval
        told = False
        while not stop.is_set():
            try:
                if await self.try_acquire():
                    self.lost.clear()
                    self._task = asyncio.create_task(self._keep(), name=f"lease {self.name}")
                    return True
                if not told:
                    log.info(  # the usual state of every process but one: not a problem
                        "lease %s is held by %s; waiting (another process runs this)",
                        self.name,
                        await self.holder(),
                    )
                    told = True
            except (RedisError, OSError) as exc:
                log.warning("lease %s: Redis unavailable (%s)", self.name, type(exc).__name__)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
        return False

    async def _keep(self) -> None:
        loop = asyncio.get_running_loop()
        ttl = self.ttl_ms / 1000
        margin = self.margin  # left to the holder to close its connection before expiry
        while True:
            await asyncio.sleep(ttl / 3)
            sent = loop.time()
            budget = self._valid_until - margin - sent
            ok = False
            if budget <= 0:  # woken late: paused past our hold
                log.warning("lease %s lost (this process was paused past its hold)", self.name)
                self.lost.set()
                return
            if budget > 0:
                try:
                    renewed = await asyncio.wait_for(
                        self._renew(keys=[self.key], args=[self.owner, self.ttl_ms]), budget
                    )
                    if not renewed:  # expired or taken: someone else may hold it now
                        log.warning("lease %s lost", self.name)
                        self.lost.set()
                        return
                    self._valid_until = sent + ttl
                    continue
                except (TimeoutError, RedisError, OSError) as exc:
                    log.warning("lease %s: renewal failed (%s)", self.name, type(exc).__name__)
                # another try only if it can still answer in time
                ok = loop.time() + ttl / 3 < self._valid_until - margin
            if not ok:
                log.warning("lease %s lost (Redis did not answer in time)", self.name)
                self.lost.set()
                return

    async def release(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        # bounded: a stalled Redis must not hold up a shutdown (the key then expires)
        with contextlib.suppress(TimeoutError, RedisError, OSError):
            await asyncio.wait_for(
                self._release(keys=[self.key], args=[self.owner]), self.ttl_ms / 3000
            )


class LeaseStop(asyncio.Event):
    """The stop handed to a run under a lease: set when the process stops or the
    keeper learns the lease is lost, and ``is_set()`` is true as soon as the lease is
    no longer surely ours (:meth:`Lease.valid`), before the keeper has run: every
    ``while not stop.is_set()`` of a gateway is a validity check.  ``wait()``
    returns when it is set (the keeper sets ``lost`` at its next turn).
    ``margin``: the lease's (:attr:`Lease.margin`), ``lost``: its :attr:`Lease.lost`."""

    def __init__(
        self,
        valid: Callable[[], bool],
        *,
        margin: float = 0.0,
        lost: asyncio.Event | None = None,
    ) -> None:
        super().__init__()
        self.valid = valid
        self.margin = margin
        self._lost = lost

    def is_set(self) -> bool:
        return super().is_set() or not self.valid()

    def lease_lost(self) -> bool:
        """Whether the lease is lost or no longer surely ours (not the process
        stopping): what the run holds must be let go within the margin."""
        return (self._lost is not None and self._lost.is_set()) or not self.valid()


def stop_grace(stop: asyncio.Event, grace: float) -> float:
    """How long a run told to stop may still spend finishing what is in flight on
    its connection (acknowledging what it took) before closing it: ``grace`` when
    the process stops; when its lease is lost, a quarter of the lease's margin at
    most (:func:`run_under_lease` cancels the run at 0.8 of the margin: its
    connection must be gone before another process can take the lease)."""
    if isinstance(stop, LeaseStop) and stop.lease_lost():
        return min(grace, stop.margin / 4)
    return grace


def holds(stop: asyncio.Event) -> Callable[[], bool]:
    """The validity check of a run's stop: its lease's :meth:`Lease.valid` when it
    runs under one, else always true (tests, a process with no lease)."""
    valid = getattr(stop, "valid", None)
    return valid if callable(valid) else (lambda: True)


async def run_under_lease(
    make_lease: Callable[[], Lease],
    run: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
    stop: asyncio.Event,
) -> None:
    """Run ``run(inner_stop)`` only while holding a lease, until ``stop``.

    Waits for the lease, runs, and ``inner_stop`` (a :class:`LeaseStop`) reads as set
    as soon as the lease is not surely ours (a resumed pause); when the lease is lost sets ``inner_stop`` and
    gives ``run`` most of :attr:`Lease.margin` to return before cancelling it: the
    connection it holds must be gone before another process can take the lease, or
    two gateways (two pollers) would run at once.  Then waits to take the lease back.
    On ``stop`` the run is told the same way and may take the time it needs (the
    process's shutdown bounds it).  An exception from ``run`` is raised.
    """
    while not stop.is_set():
        lease = make_lease()
        if not await lease.acquire(stop):
            return
        inner = LeaseStop(lease.valid, margin=lease.margin, lost=lease.lost)
        task: asyncio.Task[None] = asyncio.create_task(run(inner), name=f"under lease {lease.name}")
        waits = {
            asyncio.create_task(stop.wait()),
            asyncio.create_task(lease.lost.wait()),
        }
        try:
            try:
                await asyncio.wait({task, *waits}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            inner.set()
            if lease.lost.is_set() and not task.done():
                done, _ = await asyncio.wait({task}, timeout=lease.margin * 0.8)
                if not done:
                    log.warning(
                        "lease %s lost and its holder did not stop in %.1f s: cancelled",
                        lease.name,
                        lease.margin * 0.8,
                    )
                    task.cancel()
            await asyncio.wait({task})  # its end, without taking its cancellation for ours
            failed = None if task.cancelled() else task.exception()
            if failed is not None:
                raise failed
        except BaseException:  # cancelled ourselves (or failing): the run ends with us
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        finally:
            await lease.release()
        if stop.is_set():
            return
        # lost, or the run stopped because the hold was in doubt (a resumed pause)
        # though the keeper's late renewal answered after all: taken back either way,
        # never left with no gateway at all
        log.warning("lease %s lost; waiting to take it back", lease.name)
