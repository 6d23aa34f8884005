"""Retry: what is retried, how long it waits (fake clock), streams that already spoke."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import orjson
import pytest

from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.base import ChatMessage, Completion, CompletionRequest, TextDelta
from agent_core.llm.errors import (
    AuthFailed,
    ContextLengthExceeded,
    InvalidResponse,
    ModelNotAvailable,
    RateLimited,
    RateLimitWindow,
    RequestFailed,
    Timeout,
)
from agent_core.llm.http import duration_secs, retry_after, status_error
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from agent_core.llm.retry import MIN_DELAY, Retry
from tests.fakes.llm_servers import (
    FakeClock,
    FakeLLMServer,
    Reply,
    ScriptedProvider,
    anthropic_error,
    openai_error,
)
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


async def test_retry_after_zero_backs_off_instead_of_spinning(clock: FakeClock) -> None:
    """``Retry-After: 0`` (proxies, compatible gateways) would otherwise send the
    retries within milliseconds: it backs off as if the header were absent, and a
    tiny wait is at least MIN_DELAY."""
    zero = [RateLimited("429", retry_after=0.0) for _ in range(2)]
    out = await retry(ScriptedProvider("s:m", *zero), clock).complete(REQ)
    assert out.text == "ok"
    assert clock.sleeps == [1.0, 2.0]  # 1 s x 2^attempt, as without a Retry-After
    r = retry(ScriptedProvider(), clock)
    assert r.delay(RateLimited("429", retry_after=0.001), 0) == MIN_DELAY


async def test_retry_after_beyond_the_limit_gives_up_at_once(clock: FakeClock) -> None:
    inner = ScriptedProvider("s:m", RateLimited("429", retry_after=3600))
    with pytest.raises(RateLimited):
        await retry(inner, clock, max_retry_after=60).complete(REQ)
    assert clock.sleeps == []


async def test_retry_after_header_from_a_real_server(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=4))
    backend = OpenAIProvider(config_for(server), PriceTable(), clock=clock)
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
    backend = OpenAIProvider(config_for(server), PriceTable(), clock=clock)
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


# OpenAI's ordinary TPM 429: the wait is in the body and the reset headers, often
# with no Retry-After at all
_TPM = (
    "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): "
    "Limit 30000, Used 29000, Requested 3000. Please try again in {}. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)


def _openai_429(message: str) -> bytes:
    error = {"message": message, "type": "tokens", "param": None, "code": "rate_limit_exceeded"}
    return orjson.dumps({"error": error})


def _rfc3339_in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("message", "headers", "wait"),
    [
        (_TPM.format("41.724s"), {}, 41.724),
        (_TPM.format("120ms"), {}, 0.12),
        (_TPM.format("6m0s"), {}, 360.0),
        # Retry-After (and retry-after-ms) win over everything
        (_TPM.format("41s"), {"retry-after": "3"}, 3.0),
        (_TPM.format("41s"), {"retry-after-ms": "1500", "retry-after": "3"}, 1.5),
        # the body's wait is for this request; the reset header is until the limit is whole
        (
            _TPM.format("2s"),
            {"x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-tokens": "0"},
            2.0,
        ),
        # no wait in the body: the reset header of the limit used up ...
        (
            "Rate limit reached",
            {
                "x-ratelimit-reset-requests": "2s",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-tokens": "1h2m3.5s",
                "x-ratelimit-remaining-tokens": "1200",
            },
            2.0,
        ),
        # ... else the largest
        (
            "Rate limit reached",
            {"x-ratelimit-reset-tokens": "41.724s", "x-ratelimit-reset-requests": "120ms"},
            41.724,
        ),
        ("Rate limit reached", {"x-ratelimit-reset-tokens": "1h2m3.5s"}, 3723.5),
        ("Rate limit reached", {}, None),
        ("Rate limit reached", {"x-ratelimit-reset-tokens": "soon"}, None),
    ],
)
def test_the_wait_of_a_429_without_retry_after(
    message: str, headers: dict[str, str], wait: float | None
) -> None:
    exc = status_error("openai", 429, _openai_429(message), headers, ())
    assert isinstance(exc, RateLimited)
    assert exc.retry_after == (pytest.approx(wait) if wait is not None else None)


def test_the_wait_of_an_anthropic_429_from_its_reset_times() -> None:
    """Anthropic sends Retry-After; without it (a proxy dropped it) the RFC 3339
    ``anthropic-ratelimit-*-reset`` of the limit used up gives the wait."""
    body = orjson.dumps(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "rate limited"}}
    )
    headers = {
        "anthropic-ratelimit-requests-remaining": "10",
        "anthropic-ratelimit-requests-reset": _rfc3339_in(50),
        "anthropic-ratelimit-input-tokens-remaining": "0",
        "anthropic-ratelimit-input-tokens-reset": _rfc3339_in(20),
    }
    exc = status_error("anthropic", 429, body, headers, ())
    assert isinstance(exc, RateLimited) and exc.retry_after is not None
    assert 17 <= exc.retry_after <= 20  # computed from the wall clock, to the second


async def _retried_once_after(
    server: FakeLLMServer, clock: FakeClock, reply: Reply, wait: float
) -> None:
    """OpenAI answers ``reply`` then the echo: Retry waits ``wait`` seconds, once,
    and the second request gets the answer."""
    server.push(reply)
    backend = OpenAIProvider(config_for(server), PriceTable(), clock=clock)
    r = Retry(backend, 3, sleep=clock.sleep, jitter=lambda: 1.0)
    await r.initialize()
    out = await r.complete(REQ)
    await r.shutdown()
    assert out.text == "echo: hi"
    assert clock.sleeps == [pytest.approx(wait)]
    assert len(server.requests) == 2


async def test_an_openai_429_without_retry_after_is_waited_out(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    """No Retry-After: the wait comes from the body (and the reset headers), so the
    retry goes once, after the window, instead of after 1 s, 2 s, 4 s into it."""
    reply = openai_error(429, "rate_limit_exceeded", _TPM.format("41.724s"), kind="tokens")
    reply.headers.update(
        {
            "x-ratelimit-remaining-tokens": "1000",
            "x-ratelimit-reset-tokens": "41.724s",
            "x-ratelimit-reset-requests": "120ms",
        }
    )
    await _retried_once_after(server, clock, reply, 41.724)


async def test_an_anthropic_429_without_retry_after_is_waited_out(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    reply = anthropic_error(429, "rate_limit_error", "Number of request tokens has exceeded")
    reply.headers.update(
        {
            "anthropic-ratelimit-tokens-remaining": "0",
            "anthropic-ratelimit-tokens-reset": _rfc3339_in(30),
        }
    )
    server.push(reply)
    backend = AnthropicProvider(config_for(server, "anthropic"), PriceTable(), clock=clock)
    r = Retry(backend, 3, sleep=clock.sleep, jitter=lambda: 1.0)
    await r.initialize()
    out = [i async for i in r.stream(REQ)][-1]
    await r.shutdown()
    assert out.text
    assert len(clock.sleeps) == 1 and 27 <= clock.sleeps[0] <= 30
    assert len(server.requests) == 2


async def test_a_known_rate_limit_window_holds_every_caller_back(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    """A 429 with a wait holds the backend's model for every caller of the process:
    a request inside the window is not sent (RateLimited with what is left); the
    retry layer sleeps that, then sends."""
    backend = OpenAIProvider(config_for(server), PriceTable(), clock=clock)
    await backend.initialize()
    server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=5))
    with pytest.raises(RateLimited):
        await backend.complete(REQ)  # one turn meets the 429
    clock.advance(1.0)
    r = Retry(backend, 3, sleep=clock.sleep, jitter=lambda: 1.0)
    out = await r.complete(REQ)  # another turn, inside the window
    assert out.text == "echo: hi"
    assert clock.sleeps == [4.0] and len(server.requests) == 2
    server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=3))
    with pytest.raises(RateLimited):
        _ = [i async for i in backend.stream(REQ)]
    items = [i async for i in r.stream(REQ)]  # streaming too
    assert items[-1].text == "echo: hi"
    assert clock.sleeps == [4.0, 3.0] and len(server.requests) == 4
    # another model of the same backend (/model, the cheap model) has its own limit
    server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=3))
    with pytest.raises(RateLimited):
        await backend.complete(REQ)
    other = CompletionRequest(REQ.messages, model="gpt-4o-mini")
    assert (await backend.complete(other)).text == "echo: hi"
    assert len(server.requests) == 6
    await backend.shutdown()


async def test_a_window_longer_than_the_limit_is_held_only_that_long(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    """A 429 asking for an hour fails calls at once (not worth waiting in a chat),
    without sending them, for LLM_RETRY_AFTER_MAX_SECS; then one goes out to ask
    again."""
    cfg = config_for(server, llm_retry_after_max_secs=60)
    backend = OpenAIProvider(cfg, PriceTable(), clock=clock)
    r = Retry(backend, 3, max_retry_after=60, sleep=clock.sleep)
    await r.initialize()
    server.push(openai_error(429, "rate_limit_exceeded", "daily limit", retry_after=3600))
    with pytest.raises(RateLimited):
        await r.complete(REQ)
    clock.advance(30)
    with pytest.raises(RateLimited) as info:
        await r.complete(REQ)
    assert info.value.retry_after == pytest.approx(3570)
    assert len(server.requests) == 1 and clock.sleeps == []
    clock.advance(31)
    assert (await r.complete(REQ)).text == "echo: hi"
    assert len(server.requests) == 2
    await r.shutdown()


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after": "NaN"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "-Infinity"}, None),
        ({"retry-after-ms": "nan"}, None),
        ({"retry-after-ms": "1e400"}, None),
        ({"retry-after-ms": "nan", "retry-after": "3"}, 3.0),
        ({"retry-after-ms": "0", "retry-after": "3"}, 3.0),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": "-5"}, 0.0),
    ],
)
def test_retry_after_that_is_no_number_of_seconds(
    headers: dict[str, str], wait: float | None
) -> None:
    assert retry_after(headers) == wait


@pytest.mark.parametrize(
    ("text", "wait"),
    [("nan", None), ("inf", None), ("9" * 400 + "s", None), ("20S", 20.0), ("1M30S", 90.0)],
)
def test_duration_secs_of_odd_text(text: str, wait: float | None) -> None:
    assert duration_secs(text) == wait


@pytest.mark.parametrize(
    ("message", "headers", "wait"),
    [
        # a gateway's "Retry-After: 0" says nothing: the body's wait ...
        (_TPM.format("20s"), {"retry-after": "0"}, 20.0),
        # ... else the reset headers
        ("Rate limit reached", {"retry-after": "0", "x-ratelimit-reset-tokens": "7s"}, 7.0),
        (_TPM.format("0s"), {"x-ratelimit-reset-tokens": "7s"}, 7.0),
        ("Rate limit reached", {"retry-after": "0"}, 0.0),
        # a unit in capitals is still one
        (_TPM.format("20S"), {}, 20.0),
        (_TPM.format("1M30S"), {"x-ratelimit-reset-tokens": "6m0s"}, 90.0),
        # a body's wait that is no number of seconds gives way to the reset headers
        (_TPM.format("9" * 400 + "s"), {"x-ratelimit-reset-tokens": "7s"}, 7.0),
        # so does a NaN anywhere
        (_TPM.format("20s"), {"retry-after": "NaN"}, 20.0),
        ("Rate limit reached", {"x-ratelimit-reset-tokens": "nan"}, None),
        (
            "Rate limit reached",
            {"x-ratelimit-reset-tokens": "nan", "x-ratelimit-reset-requests": "2s"},
            2.0,
        ),
    ],
)
def test_a_source_that_says_nothing_gives_way_to_the_next(
    message: str, headers: dict[str, str], wait: float | None
) -> None:
    exc = status_error("openai", 429, _openai_429(message), headers, ())
    assert isinstance(exc, RateLimited)
    assert exc.retry_after == (pytest.approx(wait) if wait is not None else None)


async def test_a_retry_after_0_in_front_of_the_bodys_wait_is_waited_out(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    """A gateway's 'Retry-After: 0' on OpenAI's 'try again in 20s': one retry,
    after 20 s, not three into the limit at 1 s, 2 s, 4 s."""
    reply = openai_error(429, "rate_limit_exceeded", _TPM.format("20s"), kind="tokens")
    reply.headers["retry-after"] = "0"
    await _retried_once_after(server, clock, reply, 20.0)


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("retry-after", "NaN"),
        ("retry-after-ms", "nan"),
        ("x-ratelimit-reset-tokens", "nan"),
        ("retry-after", "inf"),
    ],
)
async def test_a_wait_header_that_is_no_number_holds_nothing_back(
    server: FakeLLMServer, clock: FakeClock, header: str, value: str
) -> None:
    """One 429 with a garbage wait (a proxy, a buggy gateway) says nothing: no
    window, so the next call goes out at once (a NaN window held the model back
    for the life of the process)."""
    reply = openai_error(429, "rate_limit_exceeded", "slow down")
    reply.headers[header] = value
    server.push(reply)
    backend = OpenAIProvider(config_for(server), PriceTable(), clock=clock)
    await backend.initialize()
    with pytest.raises(RateLimited) as info:
        await backend.complete(REQ)
    assert info.value.retry_after is None
    r = Retry(backend, 3, sleep=clock.sleep, jitter=lambda: 1.0)
    try:
        out = await r.complete(REQ)
    finally:
        await backend.shutdown()
    assert out.text == "echo: hi"
    assert len(server.requests) == 2 and clock.sleeps == []


async def test_only_a_window_of_some_time_is_kept(server: FakeLLMServer, clock: FakeClock) -> None:
    """However a RateLimited gets its wait: NaN opens no window (and never blocks
    a valid 429's window); an endless one is held LLM_RETRY_AFTER_MAX_SECS only."""
    backend = OpenAIProvider(
        config_for(server, llm_retry_after_max_secs=60), PriceTable(), clock=clock
    )
    await backend.initialize()
    body = {"model": "gpt-4o"}
    backend._note(body, RateLimited("429", float("nan")))
    assert (await backend.complete(REQ)).text == "echo: hi"  # sent: nothing held back
    server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=5))
    with pytest.raises(RateLimited):
        await backend.complete(REQ)
    backend._note(body, RateLimited("429", float("nan")))  # does not replace it either
    clock.advance(5)
    assert (await backend.complete(REQ)).text == "echo: hi"
    backend._note(body, RateLimited("429", float("inf")))
    clock.advance(59)
    with pytest.raises(RateLimitWindow) as info:
        await backend.complete(REQ)
    assert info.value.retry_after == float("inf")  # Retry gives up at once on it
    clock.advance(1)
    assert (await backend.complete(REQ)).text == "echo: hi"
    await backend.shutdown()
    assert len(server.requests) == 4
