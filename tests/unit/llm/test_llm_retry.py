"""Retry: what is retried, how long it waits (fake clock), streams that already spoke."""

from __future__ import annotations

import httpx
import pytest

from agent_core.llm.base import ChatMessage, Completion, CompletionRequest, TextDelta
from agent_core.llm.errors import (
    AuthFailed,
    ContextLengthExceeded,
    InvalidResponse,
    ModelNotAvailable,
    RateLimited,
    RequestFailed,
    Timeout,
)
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from agent_core.llm.retry import Retry
from tests.fakes.llm_servers import FakeClock, FakeLLMServer, ScriptedProvider, openai_error
from tests.unit.llm.conftest import config_for

REQ = CompletionRequest((ChatMessage("user", "hi"),))


def retry(inner: ScriptedProvider, clock: FakeClock, jitter: float = 1.0, **kw: float) -> Retry:
    return Retry(inner, 3, sleep=clock.sleep, jitter=lambda: jitter, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "exc",
    [
        RequestFailed("500"),
        RateLimited("429"),
        InvalidResponse("bad json"),
        Timeout("slow"),
        httpx.ConnectError("refused"),
    ],
)
async def test_transient_errors_are_retried(exc: Exception, clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", exc, exc, default="fine")
    out = await retry(inner, clock).complete(REQ)
    assert out.text == "fine"
    assert len(inner.calls) == 3
    assert clock.sleeps == [1.0, 2.0]  # 1 s x 2^attempt


@pytest.mark.parametrize(
    "exc", [AuthFailed("401"), ContextLengthExceeded("too long"), ModelNotAvailable("404")]
)
async def test_permanent_errors_are_not_retried(exc: Exception, clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", exc)
    with pytest.raises(type(exc)):
        await retry(inner, clock).complete(REQ)
    assert len(inner.calls) == 1
    assert clock.sleeps == []


async def test_gives_up_after_max_retries(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", *[RequestFailed(str(i)) for i in range(10)])
    with pytest.raises(RequestFailed, match="3"):
        await retry(inner, clock).complete(REQ)
    assert len(inner.calls) == 4  # 1 + LLM_MAX_RETRIES
    assert clock.sleeps == [1.0, 2.0, 4.0]


async def test_jitter_bounds_and_floor(clock: FakeClock) -> None:
    r = retry(ScriptedProvider(), clock, jitter=0.75)
    assert r.delay(RequestFailed(), 0) == 0.75
    assert r.delay(RequestFailed(), 2) == 3.0
    r = Retry(ScriptedProvider(), 3, sleep=clock.sleep, jitter=lambda: 0.0)  # type: ignore[arg-type]
    assert r.delay(RequestFailed(), 0) == 0.1  # floor 100 ms
    real = Retry(ScriptedProvider())  # type: ignore[arg-type]
    for _ in range(50):
        assert 0.75 <= real.delay(RequestFailed(), 0) <= 1.25


async def test_retry_after_is_slept_exactly(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", RateLimited("429", retry_after=7.5), RateLimited("429", 0.25))
    out = await retry(inner, clock, jitter=1.2).complete(REQ)
    assert out.text == "ok"
    assert clock.sleeps == [7.5, 0.25]


async def test_retry_after_beyond_the_limit_gives_up_at_once(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", RateLimited("429", retry_after=3600))
    with pytest.raises(RateLimited):
        await retry(inner, clock, max_retry_after=60).complete(REQ)
    assert clock.sleeps == []


async def test_retry_after_header_from_a_real_server(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=4))
    backend = OpenAIProvider(config_for(server), PriceTable())
    r = Retry(backend, 3, sleep=clock.sleep)
    await r.initialize()
    out = await r.complete(REQ)
    await r.shutdown()
    assert out.text == "echo: hi"
    assert clock.sleeps == [4.0]
    assert len(server.requests) == 2


async def test_a_request_over_the_tokens_per_minute_limit_is_not_retried(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    """OpenAI's 429 "Request too large ... (TPM)" cannot succeed by waiting: it is a
    ContextLengthExceeded carrying the limit (the turn compacts under it), sent once;
    an ordinary TPM 429 ("Rate limit reached ... Please try again in 6s") is still
    waited out."""
    too_large = (
        "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): "
        "Limit 30000, Requested 45210. The input or output tokens must be reduced in "
        "order to run successfully. Visit https://platform.openai.com/account/rate-limits "
        "to learn more."
    )
    server.push(openai_error(429, "rate_limit_exceeded", too_large, kind="tokens"))
    backend = OpenAIProvider(config_for(server), PriceTable())
    r = Retry(backend, 3, sleep=clock.sleep, jitter=lambda: 1.0)
    await r.initialize()
    with pytest.raises(ContextLengthExceeded) as info:
        _ = [i async for i in r.stream(REQ)]
    assert info.value.limit == 30_000
    assert len(server.requests) == 1 and clock.sleeps == []
    reached = (
        "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): "
        "Limit 30000, Used 27000, Requested 4000. Please try again in 2s."
    )
    server.push(openai_error(429, "rate_limit_exceeded", reached, kind="tokens", retry_after=2))
    assert (await r.complete(REQ)).text == "echo: hi"
    await r.shutdown()
    assert clock.sleeps == [2.0]


async def test_stream_failing_before_text_is_retried(clock: FakeClock) -> None:
    final = Completion("hello", provider="s:m")
    inner = ScriptedProvider("s:m", [RequestFailed("boom")], [TextDelta("hello"), final])
    items = [i async for i in retry(inner, clock).stream(REQ)]
    assert items == [TextDelta("hello"), final]
    assert clock.sleeps == [1.0]


async def test_stream_that_already_yielded_text_is_not_retried(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", [TextDelta("half an "), InvalidResponse("cut")])
    seen = []
    with pytest.raises(InvalidResponse):
        async for item in retry(inner, clock).stream(REQ):
            seen.append(item)
    assert seen == [TextDelta("half an ")]
    assert len(inner.calls) == 1
    assert clock.sleeps == []
