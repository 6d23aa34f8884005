"""What every HTTP backend shares: the long-lived client, error mapping, SSE.

A backend subclasses :class:`HTTPBackend` and supplies the wire format
(building the body, parsing the answer and the stream).  Everything that can
go wrong on the wire is translated here into the tree in
:mod:`agent_core.llm.errors`, with secrets scrubbed from the text.  Under the
httpx client runs aiohttp's connection pool (:class:`MappedAiohttpTransport`),
far cheaper in CPU per request than httpx's own transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import math
import re
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport
from httpx_sse import EventSource, ServerSentEvent, SSEError

from agent_core.llm.base import ModelInfo
from agent_core.llm.config import BackendConfig
from agent_core.llm.errors import (
    AuthFailed,
    BadRequest,
    ContextLengthExceeded,
    InvalidResponse,
    LLMError,
    ModelNotAvailable,
    OutOfCredit,
    RateLimited,
    RateLimitWindow,
    RequestFailed,
    Timeout,
    redact,
)
from agent_core.llm.prices import PriceTable

log = logging.getLogger(__name__)

_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context_length",
    "prompt is too long",
    "maximum context",
    "context window",
    "too many tokens",
    "input is too long",
    "reduce the length",
    "string_above_max_length",
    # Anthropic: "input length and `max_tokens` exceed context limit: N + M > W"
    "exceed context limit",
)
# after an answer's final event: how long to wait for the body to end properly
# (normally it already has, and the connection goes back to the pool)
DRAIN_SECS = 0.5
# a rate-limit window this close to its end no longer holds a request back (a
# sleep of exactly the wait may wake a hair early)
GATE_SLACK_SECS = 0.05
_MODEL_MARKERS = (
    "model_not_found",
    "does not exist",
    "not found",
    "unknown model",
    "no such model",
)
# OpenAI's 429 for one request over the tokens-per-minute limit: "Request too large
# for gpt-4o ... on tokens per min (TPM): Limit 30000, Requested 45210. The input or
# output tokens must be reduced in order to run successfully."
_TOO_LARGE_MARKERS = ("request too large", "tokens must be reduced")
_LIMIT = re.compile(r"limit:?\s*([0-9]+)")
# the provider account has no credit left (a problem of the account, not the
# request): Anthropic's 400 "Your credit balance is too low..." and its
# billing_error, OpenRouter's 402 "Insufficient credits", OpenAI's insufficient_quota
_NO_CREDIT_MARKERS = (
    "insufficient_quota",
    "billing_error",
    "credit balance is too low",
    "insufficient credits",
)


def _secs(value: float) -> float | None:
    """``value`` seconds, at least 0; None when it is no number of seconds at all
    (``NaN``, ``inf``: a garbage header must not hold a model back for ever)."""
    return max(value, 0.0) if math.isfinite(value) else None


def _header_secs(raw: str | None, scale: float = 1.0) -> float | None:
    """A header's number times ``scale`` as seconds; None when it holds none."""
    if not raw:
        return None
    try:
        return _secs(float(raw) * scale)
    except ValueError:
        return None


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP
    date): the first that gives more than 0; None when neither says (missing,
    garbage, not finite)."""
    ms = _header_secs(headers.get("retry-after-ms"), 1e-3)
    if ms:
        return ms
    raw = headers.get("retry-after")
    secs = _header_secs(raw)
    if secs is None and raw:
        with contextlib.suppress(TypeError, ValueError):
            when = email.utils.parsedate_to_datetime(raw)
            secs = max(when.timestamp() - time.time(), 0.0)
    return ms if secs is None else secs


# Go-style durations, as OpenAI (and Groq) write x-ratelimit-reset-*: "41.724s",
# "120ms", "6m0s", "1h2m3.5s"; a bare number is seconds
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|ms|us|µs|ns|m|s)")
_DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:h|ms|us|µs|ns|m|s))+")
_UNIT_SECS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
# OpenAI's 429 body: "... Please try again in 41.724s." / "in 120ms" / "in 1m30s"
_TRY_AGAIN = re.compile(
    r"try again in\s+((?:[0-9]+(?:\.[0-9]+)?(?:h|ms|us|µs|ns|m|s))+)(?![a-z])", re.IGNORECASE
)


def duration_secs(text: str) -> float | None:
    """Seconds in ``"41.724s"``, ``"6m0s"``, ``"120ms"``, ``"1h2m3.5s"`` or ``"7"``
    (units in any case: ``"20S"``); None when it is none, or not finite."""
    text = text.strip().lower()
    try:
        return _secs(float(text))
    except ValueError:
        pass
    if not _DURATION.fullmatch(text):
        return None
    return _secs(sum(float(n) * _UNIT_SECS[u] for n, u in _DURATION_PART.findall(text)))


def _until_secs(text: str) -> float | None:
    """Seconds from now until an RFC 3339 time (Anthropic's ``...-reset``)."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when.timestamp() - time.time(), 0.0)


def _remaining_is_zero(raw: str | None) -> bool:
    try:
        return raw is not None and float(raw) == 0
    except ValueError:
        return False


def _reset_wait(headers: Mapping[str, str]) -> float | None:
    """The wait the rate-limit reset headers give for a 429.

    OpenAI (and compatible servers): ``x-ratelimit-reset-<limit>`` (a duration) with
    ``x-ratelimit-remaining-<limit>``; Anthropic: ``anthropic-ratelimit-<limit>-reset``
    (an RFC 3339 time) with ``anthropic-ratelimit-<limit>-remaining``.  The largest
    reset among the limits used up (remaining 0), else the largest of all.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    spent: list[float] = []
    every: list[float] = []
    for name, value in lower.items():
        if name.startswith("x-ratelimit-reset-"):
            limit = name.removeprefix("x-ratelimit-reset-")
            secs = duration_secs(value)
            remaining = lower.get(f"x-ratelimit-remaining-{limit}")
        elif name.startswith("anthropic-ratelimit-") and name.endswith("-reset"):
            limit = name.removeprefix("anthropic-ratelimit-").removesuffix("-reset")
            secs = _until_secs(value)
            remaining = lower.get(f"anthropic-ratelimit-{limit}-remaining")
        else:
            continue
        if secs is None:
            continue
        every.append(secs)
        if _remaining_is_zero(remaining):
            spent.append(secs)
    if spent:
        return max(spent)
    return max(every) if every else None


def rate_limit_wait(headers: Mapping[str, str], message: str = "") -> float | None:
    """Seconds a 429 asks to wait, from the first source that gives more than 0.

    ``retry-after-ms`` / ``Retry-After``; else the body's "Please try again in 41.724s"
    (OpenAI's wait for this very request); else the rate-limit reset headers
    (:func:`_reset_wait`; OpenAI's is the time until the limit is whole again, so it
    can be longer than needed).  A source that says 0 (a gateway's ``Retry-After:
    0``) or nothing usable gives way to the next; 0 when the only ones that say
    anything say 0, None when nothing says.
    """
    m = _TRY_AGAIN.search(message)
    said_zero = False
    for wait in (
        retry_after(headers),
        duration_secs(m.group(1)) if m else None,
        _reset_wait(headers),
    ):
        if wait:
            return wait
        said_zero = said_zero or wait is not None
    return 0.0 if said_zero else None


def error_detail(body: bytes) -> tuple[str, str]:
    """(code/type, message) from an error body in OpenAI, Anthropic or Ollama form."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "", body[:300].decode("utf-8", "replace").strip()
    if not isinstance(data, dict):
        return "", str(data)[:300]
    err = data.get("error", data)
    if isinstance(err, str):
        return "", err
    if isinstance(err, dict):
        code = str(err.get("code") or err.get("type") or "")
        return code, str(err.get("message") or err.get("detail") or "")
    return "", str(data.get("message", ""))[:300]


def status_error(
    label: str, status: int, body: bytes, headers: Mapping[str, str], secrets: tuple[str, ...]
) -> LLMError:
    """Translate an HTTP error answer into the error tree."""
    code, message = error_detail(body)
    text = redact(f"{label}: HTTP {status}" + (f": {message[:300]}" if message else ""), *secrets)
    low = f"{code} {message}".lower()
    if status == 402 or any(m in low for m in _NO_CREDIT_MARKERS):
        return OutOfCredit(text + " (the account is out of credit)")
    if status == 429:
        if any(m in low for m in _TOO_LARGE_MARKERS):
            # larger than the account's tokens-per-minute limit: waiting never helps,
            # a smaller prompt does
            limit = _LIMIT.search(low)
            return ContextLengthExceeded(
                text + " (larger than the account's tokens-per-minute limit)",
                int(limit.group(1)) if limit else None,
            )
        return RateLimited(text, rate_limit_wait(headers, message))
    if status in (401, 403):
        return AuthFailed(text)
    if any(m in low for m in _CONTEXT_MARKERS) or status == 413:
        return ContextLengthExceeded(text)
    if status == 404 or (
        status == 400 and "model" in low and any(m in low for m in _MODEL_MARKERS)
    ):
        return ModelNotAvailable(text)
    if status == 408:
        return Timeout(text)
    if status >= 500 or status == 409:
        return RequestFailed(text)
    return BadRequest(text)


def transport_error(label: str, base_url: str, exc: httpx.HTTPError) -> LLMError:
    """Translate an httpx transport failure (no answer, or an answer cut short)."""
    if isinstance(exc, httpx.TimeoutException):
        kind = "connecting" if isinstance(exc, httpx.ConnectTimeout) else "waiting for an answer"
        return Timeout(f"{label}: timed out {kind} ({base_url})")
    if isinstance(exc, httpx.ConnectError):
        return RequestFailed(f"{label}: cannot connect to {base_url}")
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return InvalidResponse(f"{label}: the connection closed mid-answer ({type(exc).__name__})")
    return RequestFailed(f"{label}: {type(exc).__name__} talking to {base_url}")


def _httpx_error(exc: aiohttp.ClientError) -> httpx.TransportError:
    """The httpx error an aiohttp failure stands for.

    httpx-aiohttp maps every ``ClientConnectionError`` it has no closer entry
    for to ``ConnectTimeout`` (a refused connection, a server hanging up
    mid-answer, a reset) and lets a malformed answer escape as a raw
    ``ClientResponseError``; this is the mapping httpx's own transport gives.
    """
    text = str(exc)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(text)
    if isinstance(exc, aiohttp.ServerTimeoutError):  # SocketTimeoutError: sock_read
        return httpx.ReadTimeout(text)
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, DNS, TLS handshake
        return httpx.ConnectError(text)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(text)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientConnectionError):
        return httpx.ReadError(text)  # the body cut short, a reset after connecting
    return httpx.TransportError(text)


@contextmanager
def _aiohttp_errors() -> Iterator[None]:
    """Re-raise aiohttp failures (raw, or as httpx-aiohttp mapped them) as
    :func:`_httpx_error` says, chained to the aiohttp exception."""
    try:
        yield
    except (httpx.TransportError, aiohttp.ClientError) as exc:
        cause = exc if isinstance(exc, aiohttp.ClientError) else exc.__cause__
        if not isinstance(cause, aiohttp.ClientError):
            raise
        mapped = _httpx_error(cause)
        if type(mapped) is httpx.TransportError and isinstance(exc, httpx.TransportError):
            raise  # nothing better than httpx-aiohttp's own (e.g. UnsupportedProtocol)
        raise mapped from cause


class _Body(httpx.AsyncByteStream):
    """An answer body from httpx-aiohttp with its errors re-mapped."""

    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _aiohttp_errors():
            async for chunk in self._inner:
                yield chunk

    async def aclose(self) -> None:
        with _aiohttp_errors():
            await self._inner.aclose()


class MappedAiohttpTransport(AiohttpTransport):
    """httpx over aiohttp (much less CPU per request than httpcore), with
    aiohttp's failures mapped to the httpx errors httpx's own transport raises."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with _aiohttp_errors():
            response = await super().handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Body(response.stream)
        return response


def env_proxy(url: str) -> bool:
    """Whether the environment (``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``...,
    read the way urllib reads it) sends ``url`` through a proxy."""
    proxies = urllib.request.getproxies()
    u = httpx.URL(url)
    if not (proxies.get(u.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(u.host)


def parse_model_list(data: Any) -> list[str]:
    """Model names from ``{data:[...]}``, ``{models:[...]}`` or a bare list."""
    items: Any = data
    if isinstance(data, dict):
        items = data.get("data", data.get("models", []))
    if not isinstance(items, list):
        return []
    names: list[str] = []
    for item in items:
        name: Any = None
        if isinstance(item, str):
            name = item
        elif isinstance(item, dict):
            for k in ("id", "name", "model", "model_name", "model_id"):
                if isinstance(item.get(k), str) and item[k]:
                    name = item[k]
                    break
            else:
                meta = item.get("metadata")
                if isinstance(meta, dict):
                    name = meta.get("name")
        if isinstance(name, str) and name and name not in names:
            names.append(name)
    return names


def loads(body: bytes, label: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidResponse(f"{label}: the answer is not valid JSON") from None


class HTTPBackend:
    """A backend over one long-lived ``httpx.AsyncClient`` (created in initialize)."""

    def __init__(
        self,
        config: BackendConfig,
        prices: PriceTable | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.clock = clock
        # model -> (hold requests until, the limit's end): see _gate
        self._limited: dict[str, tuple[float, float]] = {}
        self.prices = prices or PriceTable()
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        # The short path (see _send): our own aiohttp transport, called directly.
        self._wire: MappedAiohttpTransport | None = None
        self._urls: dict[str, httpx.URL] = {}
        self._headers: dict[tuple[tuple[str, str], ...], httpx.Headers] = {}
        self._secrets = tuple(s for s in (config.api_key, *config.extra_headers.values()) if s)

    # --- lifecycle ---------------------------------------------------------
    @property
    def name(self) -> str:
        return self.config.label

    def headers(self) -> dict[str, str]:
        """Headers of every request (auth goes here)."""
        return dict(self.config.extra_headers)

    @property
    def api_root(self) -> str:
        return self.config.base_url

    async def initialize(self) -> None:
        if self._client is not None:
            return
        c = self.config
        limits = httpx.Limits(
            max_connections=c.pool_size,
            max_keepalive_connections=c.pool_size,
            keepalive_expiry=60.0,
        )
        transport = self._transport
        if transport is None and not env_proxy(self.api_root):
            # httpx's API over aiohttp's connection pool: a streamed call costs
            # ~1.3-2 ms CPU against ~3-5 ms over httpcore + anyio + h11.  Behind
            # a proxy from the environment (HTTPS_PROXY...) httpx's own
            # transport is kept: it honours every proxy setting httpx does.
            transport = self._wire = MappedAiohttpTransport(limits=limits)
        self._client = httpx.AsyncClient(
            base_url=self.api_root,
            headers=self.headers(),
            timeout=httpx.Timeout(c.timeout_secs, connect=c.connect_timeout_secs),
            limits=limits,
            transport=transport,
        )

    async def shutdown(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError(f"{self.name}: initialize() was not awaited")
        return self._client

    def model_info(self, model: str | None = None) -> ModelInfo:
        info = self.prices.lookup(model or self.config.model, local=self.config.local)
        info = replace(info, max_output_tokens=self.config.max_tokens)
        if self.config.context_window:  # the server's own limit (Ollama's num_ctx)
            info = replace(info, context_window=self.config.context_window)
        if self.config.vision is not None and (model is None or model == self.config.model):
            info = replace(info, supports_vision=self.config.vision)
        return info

    # --- the wire ----------------------------------------------------------
    def error(self, exc: httpx.HTTPError) -> LLMError:
        return transport_error(self.name, self.config.base_url, exc)

    def status_error(self, response: httpx.Response, body: bytes) -> LLMError:
        return status_error(self.name, response.status_code, body, response.headers, self._secrets)

    async def _send(self, path: str, content: bytes, headers: dict[str, str]) -> httpx.Response:
        """POST through the client, or straight to our aiohttp transport.

        The short path builds the ``httpx.Request`` from a URL and headers merged
        once per path (httpx's URL merging and parsing, cookie handling, auth and
        redirect machinery were a third of a streamed call's CPU) and hands it to
        the transport with the client's timeouts.  Nothing else differs: same
        request, same ``httpx.Response``, same errors.  Used only when the
        transport is the one we built (not injected, no proxy).
        """
        client = self.client
        if self._wire is None:
            request = client.build_request("POST", path, content=content, headers=headers)
            return await client.send(request, stream=True)
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = client.build_request("POST", path).url
        key = tuple(headers.items())
        merged = self._headers.get(key)
        if merged is None:
            merged = self._headers[key] = httpx.Headers(client.headers)
            merged.update(headers)
        request = httpx.Request(
            "POST",
            url,
            headers=merged,
            content=content,
            extensions={"timeout": client.timeout.as_dict()},
        )
        response = await self._wire.handle_async_request(request)
        response.request = request
        return response

    # --- a known rate-limit window, shared by every caller ------------------
    def _gate(self, body: dict[str, Any]) -> None:
        """Raise :class:`RateLimitWindow` (a :class:`RateLimited`) without sending
        while the model is inside a rate-limit window an earlier 429 announced
        (every turn of this process shares it): the retry layer waits out what is
        left instead of sending a request the provider would refuse (refused
        requests count against the limit too), and failover moves on to the next
        provider without counting it as the provider's failure (it was not asked)."""
        model = str(body.get("model") or "")
        window = self._limited.get(model)
        if window is None:
            return
        hold, until = window
        now = self.clock()
        if not hold - now > GATE_SLACK_SECS:  # over (a window that is no time: too)
            del self._limited[model]
            return
        raise RateLimitWindow(
            f"{self.name}: rate limited for {until - now:.1f}s more (not sent)", until - now
        )

    def _note(self, body: dict[str, Any], exc: LLMError) -> LLMError:
        """Remember the window of a 429 that says how long it lasts.  Requests are
        held back for at most ``retry_after_max_secs`` (LLM_RETRY_AFTER_MAX_SECS):
        a longer limit (an endless one too) fails calls at once (the retry layer
        does not wait for it) until then, and after that one request goes out to
        ask again.  A wait that is no number (NaN) holds nothing back."""
        wait = exc.retry_after if isinstance(exc, RateLimited) else None
        if wait is None or not wait > 0:  # none, 0, NaN
            return exc
        now = self.clock()
        hold = now + min(wait, self.config.retry_after_max_secs)
        if not math.isfinite(hold):
            return exc
        model = str(body.get("model") or "")
        old = self._limited.get(model)
        if old is None or hold > old[0]:
            self._limited[model] = (hold, now + wait)
        return exc

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body``; the decoded JSON answer, or the mapped error."""
        self._gate(body)
        try:
            response = await self._send(
                path, orjson.dumps(body), {"content-type": "application/json"}
            )
            try:
                await response.aread()
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise self.error(exc) from exc
        if response.status_code >= 400:
            raise self._note(body, self.status_error(response, response.content))
        return loads(response.content, self.name)

    async def get_json(self, path: str) -> Any:
        try:
            response = await self.client.get(path)
        except httpx.HTTPError as exc:
            raise self.error(exc) from exc
        if response.status_code >= 400:
            raise self.status_error(response, response.content)
        return loads(response.content, self.name)

    @asynccontextmanager
    async def sse(
        self, path: str, body: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[ServerSentEvent]]:
        """POST ``body`` and yield its server-sent events (errors mapped)."""
        self._gate(body)
        try:
            response = await self._send(
                path,
                orjson.dumps(body),
                {"content-type": "application/json", "accept": "text/event-stream"},
            )
        except httpx.HTTPError as exc:
            raise self.error(exc) from exc
        try:
            if response.status_code >= 400:
                raise self._note(body, self.status_error(response, await response.aread()))
            yield self._events(response)
        except httpx.HTTPError as exc:
            raise self.error(exc) from exc
        finally:
            # a body cut short or held open only closes the connection
            with contextlib.suppress(httpx.HTTPError):
                await response.aclose()

    async def drain(self, events: AsyncIterator[ServerSentEvent]) -> None:
        """Read what follows an answer's final event (``[DONE]``, ``message_stop``).

        Normally only the end of the body, so the connection goes back to the
        pool.  The answer is whole by now: a connection dropped without a proper
        end, or a body kept open past :data:`DRAIN_SECS`, is no failure (the
        connection is then closed instead of reused), and events after it are
        ignored.
        """
        with contextlib.suppress(LLMError, TimeoutError):
            async with asyncio.timeout(DRAIN_SECS):
                async for _ in events:
                    pass

    async def _events(self, response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
        try:
            async for event in EventSource(response).aiter_sse():
                yield event
        except SSEError as exc:
            raise InvalidResponse(f"{self.name}: expected an event stream ({exc})") from None
        except httpx.HTTPError as exc:
            raise self.error(exc) from exc

    async def list_models(self) -> list[str]:
        return parse_model_list(await self.get_json("models"))
