"""Circuit breaker: stop calling a backend that keeps failing.

::

    closed --threshold consecutive transient failures--> open
    open   --recovery seconds pass--------------------> half_open
    half_open --2 successful probes-------------------> closed
    half_open --any transient failure-----------------> open

While open, calls fail at once with :class:`CircuitOpen` without touching the
backend.  Only transient errors (5xx, timeouts, bad answers) count; a permanent
error (bad key, prompt too long) proves the backend answers, so it counts as a
success.  A rate limit (429, :class:`RateLimited`) counts as neither: the backend
answered, and its limit is waited out by the retry layer and the backend's own
rate-limit window (``HTTPBackend``), never turned into a pause of
``recovery_secs`` for every caller.  ``clock`` is injectable for tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from enum import Enum

from agent_core.llm.base import Completion, CompletionRequest, LLMProvider, StreamItem
from agent_core.llm.errors import CircuitOpen, LLMError, RateLimited
from agent_core.llm.retry import is_retryable
from agent_core.llm.wrapper import Wrapper, aclose

log = logging.getLogger(__name__)


class State(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker(Wrapper):
    def __init__(
        self,
        inner: LLMProvider,
        threshold: int = 5,
        recovery_secs: float = 30.0,
        *,
        probes: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(inner)
        self.threshold = threshold
        self.recovery_secs = recovery_secs
        self.probes = probes
        self._clock = clock
        self._state = State.CLOSED
        self._failures = 0
        self._successes = 0
        self._opened_at = 0.0
        self._in_flight = 0  # probes running while half open

    @property
    def state(self) -> State:
        if self._state is State.OPEN and self._clock() - self._opened_at >= self.recovery_secs:
            self._state = State.HALF_OPEN
            self._successes = 0
            self._in_flight = 0
            log.info("%s: circuit half open, probing", self.inner.name)
        return self._state

    def _admit(self) -> None:
        state = self.state
        if state is State.OPEN:
            wait = self.recovery_secs - (self._clock() - self._opened_at)
            raise CircuitOpen(
                f"{self.inner.name}: the model is failing; not trying again for {wait:.0f}s"
            )
        if state is State.HALF_OPEN:
            if self._in_flight >= self.probes - self._successes:
                raise CircuitOpen(f"{self.inner.name}: the model is failing; probing recovery")
            self._in_flight += 1

    def _success(self, admitted_half_open: bool) -> None:
        if admitted_half_open:
            self._in_flight = max(self._in_flight - 1, 0)
        if self._state is State.HALF_OPEN:
            self._successes += 1
            if self._successes >= self.probes:
                self._state = State.CLOSED
                log.info("%s: circuit closed again", self.inner.name)
        self._failures = 0

    def _failure(self, admitted_half_open: bool) -> None:
        if admitted_half_open:
            self._in_flight = max(self._in_flight - 1, 0)
        if self._state is State.HALF_OPEN:
            self._open()
            return
        self._failures += 1
        if self._state is State.CLOSED and self._failures >= self.threshold:
            self._open()

    def _open(self) -> None:
        self._state = State.OPEN
        self._opened_at = self._clock()
        self._failures = 0
        log.warning(
            "%s: circuit open for %.0fs after repeated failures",
            self.inner.name,
            self.recovery_secs,
        )

    def _record(self, exc: BaseException, half_open: bool) -> None:
        if isinstance(exc, RateLimited):
            # the backend answered, asking us to slow down: neither a failure nor
            # a success (a probe's slot is freed, nothing else changes)
            if half_open:
                self._in_flight = max(self._in_flight - 1, 0)
        elif is_retryable(exc):
            self._failure(half_open)
        elif isinstance(exc, LLMError):
            self._success(half_open)
        elif half_open:
            self._in_flight = max(self._in_flight - 1, 0)

    async def complete(self, request: CompletionRequest) -> Completion:
        self._admit()
        half_open = self._state is State.HALF_OPEN
        try:
            result = await self.inner.complete(request)
        except BaseException as exc:
            self._record(exc, half_open)
            raise
        self._success(half_open)
        return result

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        self._admit()
        half_open = self._state is State.HALF_OPEN
        it = self.inner.stream(request)
        done = False
        try:
            async for item in it:
                if isinstance(item, Completion):
                    self._success(half_open)
                    done = True
                yield item
        except BaseException as exc:
            if not done:
                self._record(exc, half_open)
            raise
        finally:
            await aclose(it)
