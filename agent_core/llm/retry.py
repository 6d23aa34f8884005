"""Retry: transient failures are tried again, with exponential backoff and jitter.

Retried: RequestFailed, RateLimited, InvalidResponse, Timeout and raw httpx
transport errors.  Never: AuthFailed, ContextLengthExceeded, ModelNotAvailable,
BadRequest, CircuitOpen.  The delay before retry ``n`` (0-based) is
``1 s × 2^n × jitter[0.75, 1.25]``, at least 100 ms; a RateLimited with a
``retry_after`` waits exactly that, at least 100 ms (unless it exceeds
``max_retry_after``: then waiting is pointless in a chat and the error is raised
at once); a ``retry_after`` of 0 backs off as if there were none.  A stream that
already yielded text is never retried (the user has seen it).

``sleep`` and ``jitter`` are injectable so tests run on a fake clock.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from agent_core.llm.base import Completion, CompletionRequest, LLMProvider, StreamItem, TextDelta
from agent_core.llm.errors import (
    InvalidResponse,
    RateLimited,
    RequestFailed,
    Timeout,
)
from agent_core.llm.wrapper import Wrapper, aclose

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
RETRYABLE = (RequestFailed, RateLimited, InvalidResponse, Timeout, httpx.TransportError)
BASE_DELAY = 1.0
MIN_DELAY = 0.1


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, RETRYABLE)


class Retry(Wrapper):
    def __init__(
        self,
        inner: LLMProvider,
        max_retries: int = 3,
        *,
        max_retry_after: float = 60.0,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(inner)
        self.max_retries = max_retries
        self.max_retry_after = max_retry_after
        self._sleep = sleep
        self._jitter = jitter or (lambda: random.uniform(0.75, 1.25))

    def delay(self, exc: BaseException, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based) after ``exc``."""
        backoff = max(MIN_DELAY, BASE_DELAY * 2.0**attempt * self._jitter())
        if isinstance(exc, RateLimited) and exc.retry_after is not None:
            # "Retry-After: 0" says nothing useful: back off as without it, never spin
            return max(exc.retry_after, MIN_DELAY) if exc.retry_after > 0 else backoff
        return backoff

    def _should_retry(self, exc: BaseException) -> bool:
        if not is_retryable(exc):
            return False
        return not (
            isinstance(exc, RateLimited)
            and exc.retry_after is not None
            and exc.retry_after > self.max_retry_after
        )

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        assert exc is not None
        seconds = self.delay(exc, state.attempt_number - 1)
        log.warning(
            "%s; retry %d/%d in %.2fs",
            exc,
            state.attempt_number,
            self.max_retries,
            seconds,
        )
        return seconds

    async def complete(self, request: CompletionRequest) -> Completion:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(self._should_retry),
            sleep=self._sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self.inner.complete(request)
        raise AssertionError("unreachable")  # pragma: no cover

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        attempt = 0
        while True:
            shown = False
            it = self.inner.stream(request)
            try:
                async for item in it:
                    if isinstance(item, TextDelta) and item.text:
                        shown = True
                    yield item
                return
            except Exception as exc:
                if shown or attempt >= self.max_retries or not self._should_retry(exc):
                    raise
                seconds = self.delay(exc, attempt)
                attempt += 1
                log.warning(
                    "stream failed before any text (%s); retry %d/%d in %.2fs",
                    exc,
                    attempt,
                    self.max_retries,
                    seconds,
                )
            finally:
                await aclose(it)
            await self._sleep(seconds)
