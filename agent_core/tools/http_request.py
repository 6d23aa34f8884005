"""``http_request``: GET / HEAD freely, anything else after approval; SSRF-guarded.

See :mod:`agent_core.tools.ssrf` for the address rules.  Redirects are followed
by hand (at most 5), each target checked again; credential headers are dropped
when one leads to another host, and an unsafe method is not repeated there
(307/308) without a new approval.  The body is read up to 1 MB
and the LLM sees at most TOOL_OUTPUT_MAX_CHARS of it.

Every hop connects to an address the check approved (DNS pinning): the URL's
host is replaced by that address, the ``Host`` header keeps the name and, for
https, so do SNI and certificate verification (httpcore's ``sni_hostname``
request extension).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import re
import zlib
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field

from agent_core.textsafe import valid_text
from agent_core.tools.base import Tool, ToolContext, ToolError
from agent_core.tools.ssrf import Refused, check_url

if TYPE_CHECKING:
    from agent_core.settings import CoreSettings

MAX_BODY = 1_000_000
MAX_REDIRECTS = 5
SAFE_METHODS = frozenset({"GET", "HEAD"})

Method = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class HttpArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown key is refused, not ignored

    method: Method = Field(default="GET", description="HTTP method")
    url: str = Field(description="absolute http(s) URL", max_length=4000)
    headers: dict[str, str] = Field(default_factory=dict, description="request headers")
    body: str = Field(default="", description="request body (text)", max_length=100_000)


_CREDENTIAL = re.compile(r"auth|cookie|token|secret|key|session|password", re.IGNORECASE)


def _credential(header: str) -> bool:
    """Headers that must not follow a redirect to another host (as browsers and
    curl do for Authorization and Cookie; API-key headers too)."""
    return bool(_CREDENTIAL.search(header))


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port); a URL that does not parse is an origin of its own
    (counted as another host; :func:`check_url` refuses it before any request)."""
    try:
        u = urlsplit(url)
        return (u.scheme.lower(), (u.hostname or "").lower(), u.port)
    except ValueError:
        return ("", url, None)


async def _read_body(resp: httpx.Response, data: bytearray) -> bytearray:
    """Up to MAX_BODY bytes of the body, decoded, into ``data`` (which holds what
    arrived should the reading fail halfway: httpx's errors are the caller's).  A
    compressed body (a server may send one despite ``accept-encoding: identity``) is
    inflated with the cap applied to the output, so a small gzip bomb costs at most
    MAX_BODY."""
    if resp.is_stream_consumed:  # built in memory (tests' mock transports): already read
        data += resp.content[:MAX_BODY]
        return data
    encoding = resp.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        async for chunk in resp.aiter_raw():
            data += chunk
            if len(data) >= MAX_BODY:
                break
        return data
    if encoding not in ("gzip", "x-gzip", "deflate"):
        data += f"(a body in {encoding!r} encoding, not shown)".encode()
        return data
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS)
    try:
        async for chunk in resp.aiter_raw():
            data += inflate.decompress(chunk, MAX_BODY - len(data))
            if len(data) >= MAX_BODY:
                break
    except zlib.error:
        data += b"\n(the compressed body was damaged)"
    return data


def _needs_approval(args: HttpArgs) -> bool:
    return args.method.upper() not in SAFE_METHODS


def _pinned(
    url: httpx.URL, address: str | None, headers: dict[str, str]
) -> tuple[httpx.URL, httpx.Headers, dict[str, Any]]:
    """``url`` sent to ``address`` (None: as is), still naming its host for HTTP and TLS."""
    out = httpx.Headers(headers)
    if address is None:
        return url, out, {}
    out["Host"] = url.netloc.decode("ascii")
    extensions: dict[str, Any] = {}
    if url.scheme == "https":
        extensions["sni_hostname"] = url.raw_host.decode("ascii")
    return url.copy_with(host=address), out, extensions


async def _send(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    method: str,
    url: str,
    body: str,
    addresses: tuple[str, ...],
) -> httpx.Response:
    """One hop, to the first checked address that accepts a connection (or as is)."""
    targets: tuple[str | None, ...] = addresses or (None,)
    for address in targets[:-1]:
        try:
            return await _send_to(client, headers, method, url, body, address)
        except httpx.ConnectError:
            continue  # e.g. an IPv6 address without IPv6 connectivity: try the next
    return await _send_to(client, headers, method, url, body, targets[-1])


async def _send_to(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    method: str,
    url: str,
    body: str,
    address: str | None,
) -> httpx.Response:
    target, sent, extensions = _pinned(httpx.URL(url), address, headers)
    req = client.build_request(
        method,
        target,
        headers=sent,
        content=body.encode() if body else None,
        extensions=extensions,
    )
    return await client.send(req, stream=True)


class HttpRequest(Tool[HttpArgs]):
    name = "http_request"
    description = (
        "Make an HTTP request to a public URL and return the status, some headers and the "
        "body. GET and HEAD run at once; other methods ask the user for approval first."
    )
    args_model = HttpArgs
    approval = _needs_approval
    external = True

    def time_limit(self, settings: CoreSettings) -> float:
        # HTTP_TOOL_TIMEOUT_SECS bounds the whole request (run); a little over it here.
        return settings.http_tool_timeout_secs + 2.0

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self, timeout: float) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=self._transport,
                timeout=timeout,
                follow_redirects=False,
                # identity: the 1 MB cap then bounds memory too (a compressed body
                # would be inflated a whole chunk at a time before the cap applies)
                headers={
                    "user-agent": "Parley/1 (+http_request tool)",
                    "accept-encoding": "identity",
                },
                # No keep-alive: pooled connections are keyed by address, and one
                # whose TLS was verified for one name must not carry another's request.
                limits=httpx.Limits(max_connections=50, max_keepalive_connections=0),
                # Never through HTTP(S)_PROXY / ALL_PROXY (nor .netrc): the SSRF check
                # pins the connection to the address it approved, and a proxy would
                # both reach what it likes and see the pinned IP as the TLS host name
                # (every https site then fails certificate verification).
                trust_env=False,
                # ...but SSL_CERT_FILE / SSL_CERT_DIR (a private CA bundle) still count
                verify=httpx.create_ssl_context(trust_env=True),
            )
        return self._client

    async def shutdown(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def run(self, args: HttpArgs, ctx: ToolContext) -> str:
        # the whole request (look-ups, redirects, a body that trickles in) within the
        # setting: httpx's own timeout bounds each connect and each read only
        limit = ctx.settings.http_tool_timeout_secs
        deadline = asyncio.get_running_loop().time() + limit
        try:
            async with asyncio.timeout_at(deadline):
                return await self._run(args, ctx, deadline)
        except TimeoutError:
            raise ToolError(f"timed out after {limit:g} s") from None

    async def _run(self, args: HttpArgs, ctx: ToolContext, deadline: float) -> str:
        s = ctx.settings
        allowed = frozenset(h.lower().rstrip(".") for h in s.id_list(s.http_tool_allowed_hosts))
        client = self._http(s.http_tool_timeout_secs)
        method, url, body = args.method.upper(), args.url, args.body
        headers = dict(args.headers)
        origin = _origin(url)
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                addresses = await check_url(url, allowed)
            except Refused as exc:
                raise ToolError(f"refused: {exc}") from None
            try:
                resp = await _send(client, headers, method, url, body, addresses)
            except httpx.TimeoutException:
                raise ToolError(f"timed out after {s.http_tool_timeout_secs:g} s") from None
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise ToolError(f"request failed: {type(exc).__name__}: {exc}") from None
            try:
                if resp.is_redirect and "location" in resp.headers:
                    # resolved against the URL as named, not the pinned address
                    nxt = str(httpx.URL(url).join(resp.headers["location"]))
                    elsewhere = _origin(nxt) != origin
                    if resp.status_code in (301, 302, 303) and method not in SAFE_METHODS:
                        method, body = "GET", ""
                    elif elsewhere and method not in SAFE_METHODS:
                        # 307/308 repeat the method and body: the user approved this
                        # request for one host, never for the one it points to
                        return (
                            f"HTTP {resp.status_code} {resp.reason_phrase}\nlocation: {nxt}\n\n"
                            f"(not followed: it would send this {method} to another host, "
                            "which was not approved; ask the user before calling it)"
                        )
                    if elsewhere:  # credentials were meant for the first host only
                        headers = {k: v for k, v in headers.items() if not _credential(k)}
                    url = nxt
                    continue
                data = bytearray()
                cut = ""
                try:
                    # a body still arriving when the tool's time is up: what came, and
                    # a note (a moment is kept to return it before the whole call's end)
                    async with asyncio.timeout_at(deadline - BODY_MARGIN_SECS):
                        await _read_body(resp, data)
                except TimeoutError:
                    cut = (
                        f"\n\n(the response was cut short after {len(data)} bytes: the "
                        f"tool's time limit of {s.http_tool_timeout_secs:g} s ran out)"
                    )
                except httpx.TimeoutException:
                    cut = (
                        f"\n\n(the response was cut short after {len(data)} bytes: "
                        f"nothing more arrived for {s.http_tool_timeout_secs:g} s)"
                    )
                except httpx.HTTPError as exc:
                    # the server closed early, a damaged chunk: what arrived, and why
                    cut = (
                        f"\n\n(the response was cut short after {len(data)} bytes: "
                        f"{type(exc).__name__}: {exc})"
                    )
            finally:
                with contextlib.suppress(httpx.HTTPError):
                    await resp.aclose()
            shown = ("content-type", "content-length", "location", "date")
            head = "\n".join(f"{k}: {v}" for k, v in resp.headers.items() if k.lower() in shown)
            text = _decoded(bytes(data[:MAX_BODY]), resp.encoding)
            return f"HTTP {resp.status_code} {resp.reason_phrase}\n{head}\n\n{text}{cut}"
        raise ToolError(f"too many redirects (more than {MAX_REDIRECTS})")


BODY_MARGIN_SECS = 0.2  # kept from the tool's time to return a body cut short


# codecs Python knows as text encodings that are no web page's charset, and whose
# decoding gives lone surrogates (UTF-7's "+2AA-", unicode_escape's "\\ud800") or
# anything a crafted body asks for: such a page is read as UTF-8
_REFUSED_CODECS = frozenset({"utf-7", "unicode-escape", "raw-unicode-escape", "punycode", "idna"})


def _text_codec(charset: str | None) -> str:
    """The codec to read a body declared in ``charset`` with: a real text encoding,
    else UTF-8 (no charset, one Python does not know, one it knows as no text
    encoding — ``base64``, ``rot13``, ``zlib`` — or one of :data:`_REFUSED_CODECS`)."""
    try:
        codec = codecs.lookup(charset or "utf-8")
    except (LookupError, ValueError):
        return "utf-8"
    if not getattr(codec, "_is_text_encoding", True) or codec.name in _REFUSED_CODECS:
        return "utf-8"
    return codec.name


def _decoded(body: bytes, charset: str | None) -> str:
    """The body as text in its declared charset (:func:`_text_codec`), what does not
    decode replaced; never a lone surrogate (:func:`valid_text`)."""
    try:
        text = body.decode(_text_codec(charset), errors="replace")
    except (LookupError, UnicodeError):
        text = body.decode("utf-8", errors="replace")
    return valid_text(text)
