"""What every web chat request passes before it reaches a route.

* **Host check (DNS rebinding).**  A web page whose name is rebound to
  127.0.0.1 becomes same-origin with the chat and could drive it.  Browsers
  always send the name they used in ``Host``, so the chat answers only to names
  that cannot be rebound by a stranger (see :class:`HostPolicy`); anything else
  gets 403 before any cookie is read or set.
* **Security headers** on every response (pages, API, static files).
* **JSON bodies only**, size-capped: a plain HTML form on another site cannot
  post here.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# room for a message of MAX_TEXT characters however a client encodes it: JSON may
# escape each as \uXXXX, twelve bytes for one emoji (a surrogate pair)
MAX_BODY = 256 * 1024
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def host_of(header: str | None) -> str | None:
    """The name in a ``Host`` header: lower case, no port, no trailing dot; None if malformed."""
    h = (header or "").strip().lower()
    if not h:
        return None
    if h.startswith("["):
        end = h.find("]")
        rest = h[end + 1 :]
        if end < 0 or (
            rest and not (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit())
        ):
            return None
        return h[1:end]
    name, sep, port = h.partition(":")
    if (sep and not (port.isascii() and port.isdigit())) or not name:
        return None
    return name.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(name: str) -> bool:
    if name.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostPolicy:
    """Which ``Host`` names the chat answers to.

    * always ``localhost``, ``127.0.0.1``, ``[::1]`` (any port), the ``HOST`` it
      listens on when that is a name or a single address, and ``PUBLIC_URL``'s host;
    * when it listens on a loopback address: nothing else;
    * when it listens beyond this machine: also any IP address (a name cannot be
      rebound onto an address typed in the address bar), and any name at all
      when ``WEB_CHAT_TOKEN`` is set (a rebound page does not have the token).
    """

    loopback: bool
    names: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def build(cls, host: str, public_url: str, *, on_heroku: bool | None = None) -> HostPolicy:
        if on_heroku is None:
            on_heroku = bool(os.environ.get("DYNO"))
        bind = host.strip() or ("0.0.0.0" if on_heroku else "127.0.0.1")
        names: set[str] = set()
        if bind not in WILDCARDS:
            name = host_of(bind if ":" not in bind.strip("[]") else f"[{bind.strip('[]')}]")
            if name:
                names.add(name)
        if public_url:
            name = host_of(urlsplit(public_url).netloc.rpartition("@")[2])
            if name:
                names.add(name)
        return cls(loopback=_is_loopback(bind), names=frozenset(names))

    def allows(self, name: str | None, *, token_set: bool) -> bool:
        if name is None:
            return False
        if name in LOOPBACK_NAMES or name in self.names:
            return True
        if self.loopback:
            return False
        return token_set or _is_ip(name)

    def remedy(self, name: str | None, *, token_set: bool) -> str:
        """What opens the chat to ``name`` (a refused one), true for this policy."""
        if name is None:
            return "The request carried no valid Host header."
        if self.loopback:
            # only PUBLIC_URL's name (or HOST's, which would not be loopback) is added
            return (
                "It listens on this machine only (a loopback HOST): to open it by another "
                "name set PUBLIC_URL to a URL with that name (a reverse proxy on this "
                "machine); WEB_CHAT_TOKEN does not open other names on a loopback address."
            )
        if token_set:  # every name is allowed then: not reached for a valid name
            return "Set PUBLIC_URL to a URL with that name."
        return (
            "To open it by another name set PUBLIC_URL to a URL with that name, or set "
            "WEB_CHAT_TOKEN (then it answers to any name and asks for the token)."
        )

    def describe(self) -> str:
        extra = ", ".join(sorted(self.names - LOOPBACK_NAMES))
        return "localhost" + (f", {extra}" if extra else "")


Endpoint = Callable[[Request], Awaitable[Response]]
Gate = Callable[[Scope], Response | None]


def secured(endpoint: Endpoint, gate: Gate) -> Endpoint:
    """``endpoint`` behind the host check, with the security headers on every response."""

    async def wrapped(request: Request) -> Response:
        response = gate(request.scope) or await endpoint(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    return wrapped


class SecuredApp:
    """The same for a mounted ASGI app (the static files)."""

    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app = app
        self.gate = gate
        self.raw = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.raw]}
            await send(message)

        refused = self.gate(scope) if scope["type"] == "http" else None
        if refused is not None:
            await refused(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


def refusal(scope: Scope, name: str | None, allowed: str, remedy: str) -> Response:
    """The 403 for a host name the chat does not answer to; ``remedy``: what would
    open it (:meth:`HostPolicy.remedy`)."""
    text = f"This chat does not answer to the host name {name!r}: open it as {allowed}. {remedy}"
    if str(scope.get("path", "")).startswith("/api/"):
        return JSONResponse({"error": text}, status_code=403)
    return PlainTextResponse(text + "\n", status_code=403)


def request_host(scope: Scope) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == b"host":
            return host_of(v.decode("latin-1"))
    return None


def is_https(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip()
    return request.url.scheme == "https" or forwarded == "https"


def client_ip(request: Request) -> str:
    """The address a request came from (on Heroku: the one its router saw)."""
    if os.environ.get("DYNO"):
        # Heroku's router appends the client address: the last entry is its word.
        forwarded = request.headers.get("x-forwarded-for", "").split(",")[-1].strip()
        if forwarded:
            return forwarded
    return request.client.host if request.client else "unknown"


async def json_body(request: Request) -> dict[str, Any] | Response:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        # Also keeps plain HTML forms on other sites from posting here.
        return JSONResponse(
            {"error": "send JSON (Content-Type: application/json)"}, status_code=415
        )
    declared = request.headers.get("content-length")
    if declared is not None and (
        not (declared.isascii() and declared.isdigit()) or int(declared) > MAX_BODY
    ):
        return JSONResponse({"error": "body too large"}, status_code=413)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return JSONResponse({"error": "body too large"}, status_code=413)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return JSONResponse({"error": "body must be JSON"}, status_code=400)
    if not isinstance(data, dict):
        return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
    return data
