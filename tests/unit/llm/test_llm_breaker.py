"""The circuit breaker's state machine, on a fake clock."""

from __future__ import annotations

import pytest

from agent_core.llm.base import ChatMessage, CompletionRequest
from agent_core.llm.breaker import CircuitBreaker, State
from agent_core.llm.errors import AuthFailed, CircuitOpen, RateLimited, RequestFailed, Timeout
from agent_core.llm.retry import Retry
from tests.fakes.llm_servers import FakeClock, FakeLLMServer, ScriptedProvider, openai_error
from tests.unit.llm.conftest import KEY, make_settings

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


async def test_rate_limits_never_open_the_circuit(clock: FakeClock) -> None:
    """A 429 is the backend answering "slow down", not failing: a turn that meets
    ``Retry-After: 2`` four times (the production chain Retry(3) -> breaker(5, 30 s))
    and the next user's 429 must not pause every user for 30 s."""
    inner = ScriptedProvider("s:m", *[RateLimited("429", retry_after=2.0) for _ in range(8)])
    b = breaker(inner, clock)
    llm = Retry(b, 3, sleep=clock.sleep)
    for _ in range(2):
        with pytest.raises(RateLimited):
            await llm.complete(REQ)
    assert b.state is State.CLOSED
    assert len(inner.calls) == 8  # every attempt reached the backend
    assert clock.sleeps == [2.0] * 6
    assert (await llm.complete(REQ)).text == "ok"


async def test_a_rate_limit_neither_counts_nor_resets_failures(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", *[RequestFailed("500")] * 4, RateLimited("429", 1.0))
    b = breaker(inner, clock)
    await fail(b, 4)
    with pytest.raises(RateLimited):
        await b.complete(REQ)
    assert b.state is State.CLOSED
    inner.outcomes.append(RequestFailed("500"))
    await fail(b, 1)  # the fifth transient failure in a row
    assert b.state is State.OPEN


async def test_a_rate_limited_probe_does_not_reopen(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", *[RequestFailed("500")] * 5, RateLimited("429", 1.0))
    b = breaker(inner, clock)
    await fail(b, 5)
    clock.advance(30)
    with pytest.raises(RateLimited):
        _ = [i async for i in b.stream(REQ)]
    assert b.state is State.HALF_OPEN
    await b.complete(REQ)
    await b.complete(REQ)  # its slot was freed: two probes still close it
    assert b.state is State.CLOSED


async def test_a_rate_limit_over_the_wire_is_waited_out_not_a_paused_circuit(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    """build_provider's chain against a fake OpenAI server answering 429 with
    ``Retry-After: 2``: the first turn tries 4 times and is told it is rate limited;
    the next turn waits out the window the last 429 announced (no request sent into
    it), then is answered; the circuit never opens."""
    from agent_core.llm.factory import build_provider

    s = make_settings(llm_backend="openai", openai_api_key=KEY, openai_base_url=server.openai_url)
    chain = build_provider(s, sleep=clock.sleep, clock=clock)
    await chain.initialize()
    limited = openai_error(429, "rate_limit_exceeded", "Rate limit reached", retry_after=2)
    server.push(*[limited] * 5)
    with pytest.raises(RateLimited):
        await chain.complete(REQ)
    assert len(server.requests) == 4 and clock.sleeps == [2.0] * 3
    out = await chain.complete(REQ)  # at once: the window of the last 429 is still on
    await chain.shutdown()
    assert out.text == "echo: hi"
    # held back 2 s without a request, then one more 429 (the fifth), 2 s, the answer
    assert clock.sleeps == [2.0] * 5
    assert len(server.requests) == 6
    assert chain.inner.inner.state is State.CLOSED  # type: ignore[attr-defined]
