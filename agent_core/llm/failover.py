"""Failover: an ordered list of providers; a failing one cools down.

A provider with ``threshold`` consecutive retryable failures is skipped for
``cooldown_secs``.  A call the backend held back unsent inside a rate-limit window
(:class:`RateLimitWindow`) moves on to the next provider but is no failure: the
provider was not asked (its 429 counted once), and its model is back when the
window ends.  If every provider is cooling down, the one that started
cooling first is used anyway: failover never blocks entirely.

Health is this class's cooldown (per provider); the circuit breaker sits above
failover (factory.CHAIN) and opens only when the chain as a whole keeps failing.
Every turn (``CompletionRequest.turn_id``) starts with the first healthy provider
in order, so one transient failure of the primary moves that turn only: the
conversation's next turn is the primary's again, with the model chosen for it.
Within a turn (its tool loop) the calls stay on the provider that answered while
it is healthy: its prompt cache is warm and the turn's tool calls are its own.
When a conversation (``session_id``) moves to another provider, tool results
whose call is not in the history are rewritten as plain user text, and a
fallback gets no model override (each fallback uses its own model).

A permanent error about the request itself (prompt too long, bad request) is
raised at once, and so is an unknown model the user chose
(``CompletionRequest.model_chosen``): the user is told, rather than answered by
another model.  A permanent error about the provider (bad key, the operator's
model unknown) moves on to the next provider without cooling the first one down.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace

from agent_core.llm.base import (
    Completion,
    CompletionRequest,
    LLMProvider,
    ModelInfo,
    StreamItem,
    TextDelta,
)
from agent_core.llm.errors import AuthFailed, CircuitOpen, ModelNotAvailable, RateLimitWindow
from agent_core.llm.retry import is_retryable
from agent_core.llm.schema import sanitize_tool_messages
from agent_core.llm.wrapper import aclose

log = logging.getLogger(__name__)

MAX_SESSIONS = 10_000
_PROVIDER_PROBLEMS = (AuthFailed, ModelNotAvailable, CircuitOpen)


@dataclass(slots=True)
class _Health:
    failures: int = 0
    cooling_until: float = 0.0
    cooled_at: float = 0.0


class Failover:
    def __init__(
        self,
        providers: Sequence[LLMProvider],
        threshold: int = 3,
        cooldown_secs: float = 300.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not providers:
            raise ValueError("Failover needs at least one provider")
        self.providers = list(providers)
        self.threshold = threshold
        self.cooldown_secs = cooldown_secs
        self._clock = clock
        self._health = [_Health() for _ in self.providers]
        self._sessions: OrderedDict[str, int] = OrderedDict()  # last provider that served
        self._turns: OrderedDict[str, int] = OrderedDict()  # a turn's provider

    @property
    def name(self) -> str:
        return self.providers[0].name

    async def initialize(self) -> None:
        for p in self.providers:
            await p.initialize()

    async def shutdown(self) -> None:
        for p in self.providers:
            await p.shutdown()

    def model_info(self, model: str | None = None) -> ModelInfo:
        """The info of the provider that serves ``model`` (its own price table and
        local flag: an Ollama fallback costs nothing, a cloud one does); the
        primary's when none does."""
        if model:
            serving = [
                p for p in self.providers if model.startswith(p.name.split(":", 1)[-1] or "\0")
            ]
            if serving:
                best = max(serving, key=lambda p: len(p.name.split(":", 1)[-1]))
                return best.model_info(model)
        return self.providers[0].model_info(model)

    async def list_models(self) -> list[str]:
        return await self.providers[0].list_models()

    # --- choosing ----------------------------------------------------------
    def cooling(self, index: int) -> bool:
        return self._health[index].cooling_until > self._clock()

    def order(self, turn_id: str = "") -> list[int]:
        """Indexes to try, best first: the healthy ones in order, the one this turn
        already uses (if healthy) first."""
        healthy = [i for i in range(len(self.providers)) if not self.cooling(i)]
        sticky = self._turns.get(turn_id) if turn_id else None
        if sticky is not None and sticky in healthy:
            healthy.remove(sticky)
            healthy.insert(0, sticky)
        if healthy:
            return healthy
        first = min(range(len(self.providers)), key=lambda i: self._health[i].cooled_at)
        return [first]

    def _request_for(
        self, index: int, request: CompletionRequest, moved: bool
    ) -> CompletionRequest:
        if index != 0 and request.model is not None:
            request = replace(request, model=None)
        if moved:
            request = replace(request, messages=sanitize_tool_messages(request.messages))
        return request

    def _moved(self, index: int, session_id: str, attempt: int) -> bool:
        previous = self._sessions.get(session_id) if session_id else None
        return attempt > 0 or (previous is not None and previous != index)

    # --- bookkeeping -------------------------------------------------------
    def _ok(self, index: int, request: CompletionRequest) -> None:
        self._health[index].failures = 0
        for key, table in ((request.session_id, self._sessions), (request.turn_id, self._turns)):
            if key:
                table[key] = index
                table.move_to_end(key)
                while len(table) > MAX_SESSIONS:
                    table.popitem(last=False)

    def _failed(self, index: int, exc: BaseException) -> None:
        if not is_retryable(exc) or isinstance(exc, RateLimitWindow):
            return  # held back unsent: the 429 that opened the window counted
        h = self._health[index]
        h.failures += 1
        if h.failures >= self.threshold:
            now = self._clock()
            h.failures = 0
            h.cooling_until = now + self.cooldown_secs
            h.cooled_at = now
            log.warning(
                "%s: %d failures in a row, cooling down for %.0fs",
                self.providers[index].name,
                self.threshold,
                self.cooldown_secs,
            )

    def _can_move_on(self, exc: BaseException, sent: CompletionRequest) -> bool:
        if isinstance(exc, ModelNotAvailable) and sent.model_chosen and sent.model:
            return False  # the user's choice, not the provider's fault: they are told
        return is_retryable(exc) or isinstance(exc, _PROVIDER_PROBLEMS)

    # --- calls -------------------------------------------------------------
    async def complete(self, request: CompletionRequest) -> Completion:
        order = self.order(request.turn_id)
        last: BaseException | None = None
        for attempt, index in enumerate(order):
            sub = self._request_for(index, request, self._moved(index, request.session_id, attempt))
            try:
                result = await self.providers[index].complete(sub)
            except Exception as exc:
                self._failed(index, exc)
                if not self._can_move_on(exc, sub):
                    raise
                last = exc
                if attempt + 1 < len(order):
                    log.warning("%s; trying the next provider", exc)
                continue
            self._ok(index, request)
            return result
        assert last is not None
        raise last

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        order = self.order(request.turn_id)
        for attempt, index in enumerate(order):
            sub = self._request_for(index, request, self._moved(index, request.session_id, attempt))
            shown = False
            it = self.providers[index].stream(sub)
            try:
                async for item in it:
                    if isinstance(item, TextDelta) and item.text:
                        shown = True
                    if isinstance(item, Completion):
                        self._ok(index, request)
                    yield item
                return
            except Exception as exc:
                self._failed(index, exc)
                if shown or not self._can_move_on(exc, sub) or attempt + 1 == len(order):
                    raise
                log.warning("%s; trying the next provider", exc)
            finally:
                await aclose(it)
