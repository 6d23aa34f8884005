"""The local web chat: a page at ``/``, a JSON API, live updates over SSE.

Each browser gets its own conversation: a signed cookie carries a random
session id, and the thread is ``web:local:<session id>``.  Messages go through
the same Ingest -> stream -> worker path as every platform; answers come back
through the thread's out stream (see ``outbox.py``), which the page follows
with Server-Sent Events and replays on refresh.

The cookie holds ``uid`` (this browser, stable: the user id for rate windows
and approvals) and ``sid`` (this browser's current conversation).  ``/new``
sent from the page starts another conversation: a fresh ``sid``, so a fresh
thread and an empty transcript; the command itself runs in the new thread, so
the agent's usual "Started a new conversation" is the first thing it shows.
The previous thread is left as it was (it idles out like any session).

Bad input: a body that is not JSON, too large, or without text -> 4xx and
nothing is published.  With ``WEB_CHAT_TOKEN`` set every API call needs the
token (asked once by the page, then kept in the signed cookie).

Every response carries a strict Content-Security-Policy (no inline script, no
third-party anything) and ``nosniff``; the page never turns text into HTML.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from itsdangerous import BadSignature, URLSafeSerializer
from pydantic import SecretStr
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_core.agent.parser import Command, parse
from agent_core.errors import StoreUnavailable
from agent_core.events import Action, EventKind, InboundEvent, ThreadKey
from agent_core.ingest import Ingest, Submitted
from agent_core.outbox import Outbox
from agent_core.settings import ParleySettings
from agent_core.store import keys
from channels.base import Channel, ChannelDeps
from channels.web.outbox import LocalOutbox, fold_transcript

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
COOKIE = "parley_web"
MAX_BODY = 64 * 1024
MAX_TEXT = 16_000
SECRET_KEY = keys.PREFIX + "web:cookie-secret"
SSE_BLOCK_MS = 1_000
SSE_PING_SECS = 15.0
CLIENT_ID = re.compile(r"^[A-Za-z0-9_-]{8,40}$")

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


class WebSettings(ParleySettings):
    web_chat_enabled: bool | None = None  # None: on when no platform channel is configured
    web_chat_token: SecretStr | None = None
    web_chat_secret: SecretStr | None = (
        None  # cookie signing key; default: generated, kept in Redis
    )


def thread_for(session_id: str) -> ThreadKey:
    return ThreadKey("web", "local", session_id, "")


class WebChannel(Channel):
    name = "web"

    def __init__(self, settings: WebSettings, deps: ChannelDeps) -> None:
        self.settings = settings
        self.redis: Redis = deps.redis
        self.blocking: Redis | None = None
        self._outbox = LocalOutbox(deps.redis, "web")
        self._signer: URLSafeSerializer | None = None
        self._closing = asyncio.Event()
        self._secret = b""

    def outbox(self) -> Outbox:
        return self._outbox

    def use_blocking_client(self, blocking: Redis) -> None:
        self.blocking = blocking

    async def initialize(self) -> None:
        if self.settings.web_chat_secret is not None:
            secret = self.settings.web_chat_secret.get_secret_value()
        else:
            # One secret shared by every web process, created once.
            await self.redis.set(SECRET_KEY, secrets.token_urlsafe(32), nx=True)
            raw = await self.redis.get(SECRET_KEY)
            secret = raw.decode() if raw else secrets.token_urlsafe(32)
        self._signer = URLSafeSerializer(secret, salt="parley-web")
        self._secret = secret.encode()

    async def shutdown(self) -> None:
        self.close_streams()

    # -- cookie session ----------------------------------------------------
    def _read_cookie(self, request: Request) -> dict[str, Any]:
        raw = request.cookies.get(COOKIE)
        if not raw or self._signer is None:
            return {}
        try:
            data = self._signer.loads(raw)
        except BadSignature:
            return {}
        return data if isinstance(data, dict) else {}

    def _set_cookie(self, request: Request, response: Response, data: dict[str, Any]) -> None:
        assert self._signer is not None
        response.set_cookie(
            COOKIE,
            self._signer.dumps(data),
            httponly=True,
            samesite="strict",
            max_age=30 * 86400,
            secure=_is_https(request),
        )

    def _authorized(self, data: dict[str, Any]) -> bool:
        token = self.settings.web_chat_token
        return token is None or data.get("auth") is True

    def _session(self, request: Request) -> tuple[dict[str, Any], bool]:
        data = self._read_cookie(request)
        fresh = False
        if not isinstance(data.get("sid"), str):
            data = {
                "sid": secrets.token_urlsafe(12),
                **({"auth": data["auth"]} if "auth" in data else {}),
            }
            fresh = True
        if not isinstance(data.get("uid"), str):
            data["uid"] = data["sid"]  # cookies from before uid existed: keep the same user
            fresh = True
        return data, fresh

    def _next_sid(self, uid: str, client_id: str | None) -> str:
        """The conversation id ``/new`` moves to.

        Derived from the message id when the page gave one, so a resend of the same
        ``/new`` (a retry after a lost response) lands in the same new conversation.
        """
        if client_id is None:
            return secrets.token_urlsafe(12)
        mac = hmac.new(self._secret, f"new:{uid}:{client_id}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()[:12]).decode()

    def _existing(self, request: Request) -> dict[str, Any] | None:
        """The cookie session, or None when the page was never loaded."""
        data = self._read_cookie(request)
        if not isinstance(data.get("sid"), str):
            return None
        data.setdefault("uid", data["sid"])
        return data

    # -- routes ------------------------------------------------------------
    def routes(self, ingest: Ingest) -> list[BaseRoute]:
        async def page(request: Request) -> Response:
            data, fresh = self._session(request)
            resp = FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})
            if fresh:
                self._set_cookie(request, resp, data)
            return resp

        async def me(request: Request) -> Response:
            data, fresh = self._session(request)
            resp = JSONResponse(
                {
                    "needs_token": not self._authorized(data),
                    "thread": str(thread_for(data["sid"])),
                }
            )
            if fresh:
                self._set_cookie(request, resp, data)
            return resp

        async def login(request: Request) -> Response:
            body = await _json_body(request)
            if isinstance(body, Response):
                return body
            data, _ = self._session(request)
            token = self.settings.web_chat_token
            given = body.get("token")
            if token is not None and not (
                isinstance(given, str)
                and hmac.compare_digest(given.encode(), token.get_secret_value().encode())
            ):
                return JSONResponse({"error": "wrong token"}, status_code=403)
            data["auth"] = True
            resp = JSONResponse({"ok": True})
            self._set_cookie(request, resp, data)
            return resp

        async def history(request: Request) -> Response:
            data = self._read_cookie(request)
            if not isinstance(data.get("sid"), str):
                return JSONResponse({"messages": [], "last": "0-0"})
            if not self._authorized(data):
                return JSONResponse({"error": "token required"}, status_code=401)
            thread = thread_for(data["sid"])
            entries = await self.redis.xrange(keys.outbox_stream(thread))
            last = entries[-1][0].decode() if entries else "0-0"
            return JSONResponse({"messages": fold_transcript(entries), "last": last})

        async def post_message(request: Request) -> Response:
            data = self._existing(request)
            if data is None:
                return JSONResponse({"error": "no session; load the page first"}, status_code=400)
            if not self._authorized(data):
                return JSONResponse({"error": "token required"}, status_code=401)
            body = await _json_body(request)
            if isinstance(body, Response):
                return body
            text = body.get("text")
            if not isinstance(text, str) or not text.strip():
                return JSONResponse({"error": "'text' must be a non-empty string"}, status_code=400)
            if len(text) > MAX_TEXT:
                return JSONResponse(
                    {"error": f"message longer than {MAX_TEXT} characters"}, status_code=413
                )
            client_id = body.get("id")
            if client_id is not None and not (
                isinstance(client_id, str) and CLIENT_ID.match(client_id)
            ):
                return JSONResponse(
                    {"error": "'id' must be 8-40 of [A-Za-z0-9_-]"}, status_code=400
                )
            sub = parse(text)
            new_conversation = isinstance(sub, Command) and sub.name == "new"
            if new_conversation:
                # "/new starts another": a fresh thread for this browser; the command
                # runs there, so the agent's confirmation opens the new transcript.
                data = {**data, "sid": self._next_sid(data["uid"], client_id)}
            thread = thread_for(data["sid"])
            event = InboundEvent(
                # the page's id makes a retry idempotent; scoped to this browser so
                # that no one else's id can collide with (or pre-empt) it
                event_id=f"{data['uid']}.{client_id}" if client_id else secrets.token_hex(8),
                kind=EventKind.MESSAGE,
                channel="web",
                thread=thread,
                user_id=data["uid"],
                user_name="you",
                text=text,
            )
            resp = await self._submit(ingest, event, record=True)
            if new_conversation and resp.status_code < 300:
                self._set_cookie(request, resp, data)
            return resp

        async def post_action(request: Request) -> Response:
            data = self._existing(request)
            if data is None or not self._authorized(data):
                return JSONResponse({"error": "token required"}, status_code=401)
            body = await _json_body(request)
            if isinstance(body, Response):
                return body
            token = body.get("token")
            if not isinstance(token, str) or not token or len(token) > 64 or not token.isascii():
                return JSONResponse({"error": "'token' must be a button payload"}, status_code=400)
            thread = thread_for(data["sid"])
            event = InboundEvent(
                event_id=secrets.token_hex(8),
                kind=EventKind.ACTION,
                channel="web",
                thread=thread,
                user_id=data["uid"],
                user_name="you",
                action=Action(token),
            )
            return await self._submit(ingest, event, record=False)

        async def events(request: Request) -> Response:
            data = self._read_cookie(request)
            if not isinstance(data.get("sid"), str):
                return JSONResponse({"error": "no session"}, status_code=400)
            if not self._authorized(data):
                return JSONResponse({"error": "token required"}, status_code=401)
            after = request.headers.get("last-event-id") or request.query_params.get("after") or "$"
            if after != "$" and not _valid_entry_id(after):
                return JSONResponse({"error": "bad 'after' id"}, status_code=400)
            thread = thread_for(data["sid"])
            return StreamingResponse(
                self._sse(thread, after, request),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )

        return [
            Route("/", _secured(page), methods=["GET"]),
            Route("/api/me", _secured(me), methods=["GET"]),
            Route("/api/login", _secured(login), methods=["POST"]),
            Route("/api/history", _secured(history), methods=["GET"]),
            Route("/api/messages", _secured(post_message), methods=["POST"]),
            Route("/api/actions", _secured(post_action), methods=["POST"]),
            Route("/api/events", _secured(events), methods=["GET"]),
            Mount("/static", app=_SecuredApp(StaticFiles(directory=STATIC)), name="static"),
        ]

    async def _retract(self, event: InboundEvent, recorded: bool) -> None:
        if recorded:
            with contextlib.suppress(RedisError):
                await self._outbox.retract_user(event.thread, event.event_id)

    async def _submit(self, ingest: Ingest, event: InboundEvent, *, record: bool) -> Response:
        # The user's message goes into the transcript *before* it is published: a
        # worker can answer within milliseconds (an open circuit breaker, a
        # command), and the answer must never show above the question.  A message
        # the store then refuses or cannot take is retracted again.
        recorded = False
        if record:
            try:
                await self._outbox.record_user(event.thread, event)
                recorded = True
            except RedisError:
                log.warning(
                    "[%s] could not record the user message in the transcript", event.thread
                )
        try:
            result = await ingest.submit(event)
        except StoreUnavailable:
            await self._retract(event, recorded)
            return JSONResponse(
                {"error": "the server cannot store messages right now"}, status_code=503
            )
        if result == Submitted.REFUSED:
            await self._retract(event, recorded)
            return JSONResponse(
                {
                    "error": "your message was not accepted (not allowed, or too many messages)",
                    "result": result.value,
                },
                status_code=429,
            )
        return JSONResponse(
            {
                "ok": True,
                "id": event.event_id,
                "result": result.value,
                "thread": str(event.thread),
            },
            status_code=202,
        )

    def close_streams(self) -> None:
        """End every live event stream now (the process is draining).

        Browsers reconnect on their own (to another web process, or to this one
        when it is back) and resume from the last entry they saw.
        """
        self._closing.set()

    async def _sse(self, thread: ThreadKey, after: str, request: Request) -> AsyncIterator[bytes]:
        client = self.blocking or self.redis
        stream = keys.outbox_stream(thread)
        last = after
        if last == "$":
            # Resolve '$' now, so nothing added between two blocking reads is missed.
            info = await self.redis.xrevrange(stream, count=1)
            last = info[0][0].decode() if info else "0-0"
        yield b"retry: 2000\n\n"
        quiet_since = time.monotonic()
        while not self._closing.is_set():
            if await request.is_disconnected():
                return
            try:
                # Short blocks: a draining process ends its streams within SSE_BLOCK_MS.
                resp = await client.xread({stream: last}, block=SSE_BLOCK_MS, count=100)
            except RedisError:
                await asyncio.sleep(1.0)
                continue
            if not resp:
                if time.monotonic() - quiet_since >= SSE_PING_SECS:
                    quiet_since = time.monotonic()
                    yield b": ping\n\n"
                continue
            quiet_since = time.monotonic()
            for _name, entries in resp:
                for entry_id, fields in entries:
                    last = entry_id.decode()
                    payload = {k.decode(): _maybe_json(v) for k, v in fields.items()}
                    yield b"id: " + entry_id + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _maybe_json(v: bytes) -> Any:
    if v[:1] in (b"{", b"["):
        try:
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            pass
    return v.decode(errors="replace")


def _valid_entry_id(s: str) -> bool:
    a, _, b = s.partition("-")
    return a.isdigit() and (b == "" or b.isdigit()) and len(s) < 40


def _is_https(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip()
    return request.url.scheme == "https" or forwarded == "https"


Endpoint = Callable[[Request], Awaitable[Response]]


def _secured(endpoint: Endpoint) -> Endpoint:
    """Add the security headers to every response of ``endpoint``."""

    async def wrapped(request: Request) -> Response:
        response = await endpoint(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    return wrapped


class _SecuredApp:
    """The same headers on a mounted ASGI app's responses (the static files)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.raw = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.raw]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _json_body(request: Request) -> dict[str, Any] | Response:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        # Also keeps plain HTML forms on other sites from posting here.
        return JSONResponse(
            {"error": "send JSON (Content-Type: application/json)"}, status_code=415
        )
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
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


def status(
    settings: WebSettings, platforms_enabled: bool, *, hosted: bool = False
) -> tuple[bool, str]:
    if settings.web_chat_enabled is True:
        if hosted and settings.web_chat_token is None:
            return True, (
                "WEB_CHAT_ENABLED=true, without WEB_CHAT_TOKEN: anyone who can reach it can chat"
            )
        return True, "WEB_CHAT_ENABLED=true"
    if settings.web_chat_enabled is False:
        return False, "WEB_CHAT_ENABLED=false"
    if platforms_enabled:
        return False, "a platform channel is configured (set WEB_CHAT_ENABLED=true to keep it)"
    if hosted:
        return (
            False,
            "listening beyond this machine (HOST, or $DYNO set); set WEB_CHAT_ENABLED=true to expose it",
        )
    return True, "no platform configured"


def create(settings: WebSettings, deps: ChannelDeps) -> WebChannel:
    return WebChannel(settings, deps)


SETTINGS = WebSettings
