"""The circuit breaker's state machine, on a fake clock."""

from __future__ import annotations

import pytest

from agent_core.llm.base import ChatMessage, CompletionRequest
from agent_core.llm.breaker import CircuitBreaker, State
from agent_core.llm.errors import AuthFailed, CircuitOpen, RequestFailed, Timeout
from tests.fakes.llm_servers import FakeClock, ScriptedProvider

REQ = CompletionRequest((ChatMessage("user", "hi"),))


def breaker(inner: ScriptedProvider, clock: FakeClock) -> CircuitBreaker:
    return CircuitBreaker(inner, threshold=5, recovery_secs=30, clock=clock)


async def fail(b: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        with pytest.raises((RequestFailed, Timeout)):
            await b.complete(REQ)


async def test_opens_after_threshold_and_rejects_without_calling(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", *[RequestFailed("500")] * 4, Timeout("slow"))
    b = breaker(inner, clock)
    await fail(b, 5)
    assert b.state is State.OPEN
    with pytest.raises(CircuitOpen):
        await b.complete(REQ)
    with pytest.raises(CircuitOpen):
        _ = [i async for i in b.stream(REQ)]
    assert len(inner.calls) == 5  # the backend was not touched


async def test_a_success_resets_the_count(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", *[RequestFailed("500")] * 4)
    b = breaker(inner, clock)
    await fail(b, 4)
    await b.complete(REQ)  # success
    inner.outcomes.extend([RequestFailed("500")] * 4)
    await fail(b, 4)
    assert b.state is State.CLOSED


async def test_permanent_errors_do_not_open(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", *[AuthFailed("401")] * 10)
    b = breaker(inner, clock)
    for _ in range(10):
        with pytest.raises(AuthFailed):
            await b.complete(REQ)
    assert b.state is State.CLOSED


async def test_half_open_closes_after_two_probes(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", *[RequestFailed("500")] * 5)
    b = breaker(inner, clock)
    await fail(b, 5)
    clock.advance(29.9)
    assert b.state is State.OPEN
    clock.advance(0.2)
    assert b.state is State.HALF_OPEN
    await b.complete(REQ)
    assert b.state is State.HALF_OPEN
    items = [i async for i in b.stream(REQ)]
    assert items[-1].text == "ok"
    assert b.state is State.CLOSED


async def test_half_open_failure_reopens(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", *[RequestFailed("500")] * 5)
    b = breaker(inner, clock)
    await fail(b, 5)
    clock.advance(30)
    await b.complete(REQ)  # first probe ok
    inner.outcomes.append(Timeout("slow"))
    await fail(b, 1)
    assert b.state is State.OPEN
    with pytest.raises(CircuitOpen):
        await b.complete(REQ)
    clock.advance(30)
    assert b.state is State.HALF_OPEN
