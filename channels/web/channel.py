"""The local web chat: a page at ``/``, a JSON API, live updates over SSE.

Each browser gets its own conversation: a signed cookie carries a random
session id, and the thread is ``web:local:<session id>``.  Messages go through
the same Ingest -> stream -> worker path as every platform; answers come back
through the thread's out stream (see ``outbox.py``), which the page follows
with Server-Sent Events; a refresh shows the thread's transcript.

The cookie holds ``uid`` (this browser, stable: the user id for rate windows
and approvals) and ``sid`` (this browser's current conversation); see
``session.py``.  ``/new`` sent from the page starts another conversation: a
fresh ``sid``, so a fresh thread and an empty transcript; the command itself
runs in the new thread, so the agent's usual "Started a new conversation" is the
first thing it shows.  The previous thread is left as it was.

Tabs: the page says which conversation it shows (``thread``) with its event
stream, its messages and its button presses.  The server takes any of this
browser's recent conversations (another tab may have started a newer one) and
answers 409 for anything else, so the page reloads the current one and says so.

Bad input: a body that is not JSON, too large, or without text -> 4xx and
nothing is published.  With ``WEB_CHAT_TOKEN`` set every API call needs the
token (asked once by the page, then proven by the signed cookie).  Requests for
a host name the chat does not answer to get 403 (``guard.py``).

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
import unicodedata
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import orjson
from pydantic import SecretStr, field_validator
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from agent_core.agent.parser import Command, parse
from agent_core.errors import StoreUnavailable
from agent_core.events import Action, EventKind, InboundEvent, ThreadKey
from agent_core.ingest import Ingest, Submitted
from agent_core.outbox import Outbox
from agent_core.settings import ParleySettings
from agent_core.store import keys
from channels.base import Channel, ChannelDeps
from channels.web.guard import (
    HostPolicy,
    SecuredApp,
    client_ip,
    host_of,
    json_body,
    refusal,
    request_host,
    secured,
)
from channels.web.outbox import LocalOutbox, read_transcript
from channels.web.session import (
    COOKIE,
    COOKIE_MAX_AGE,
    MIN_TOKEN_CHARS,
    SESSION_ID,
    Conversations,
    LoginThrottle,
    Sessions,
)

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


def _page() -> bytes:
    """index.html with each ``/static/<file>?v=…`` link versioned by that file's
    content: a browser that cached an older script or stylesheet fetches the new
    one (no version number to remember to bump)."""

    def versioned(m: re.Match[str]) -> str:
        digest = hashlib.sha256((STATIC / m.group(1)).read_bytes()).hexdigest()[:12]
        return f"/static/{m.group(1)}?v={digest}"

    html = (STATIC / "index.html").read_text(encoding="utf-8")
    return re.sub(r"/static/([\w.-]+)\?v=[\w]*", versioned, html).encode()


PAGE = _page()
MAX_TEXT = 16_000
SECRET_KEY = keys.PREFIX + "web:cookie-secret"
# earlier keys, verify only: a sorted set scored by when each was retired (ms), each
# kept COOKIE_MAX_AGE from then (a later switch renews none), the last RETIRED_MAX
RETIRED_KEY = keys.PREFIX + "web:cookie-secret:retired-at"
RETIRED_MAX = 5
KEY_CHECK_SECS = 60.0  # how often a web process checks that its cookie key is Redis's
SSE_BLOCK_MS = 1_000
SSE_PING_SECS = 15.0
CLIENT_ID = re.compile(r"^[A-Za-z0-9_-]{8,40}$")
STORE_DOWN = "the server cannot reach its storage right now; try again in a moment"


class WebSettings(ParleySettings):
    # WEB_CHAT_TOKEN is a passphrase typed into the page and sent in /api/login's
    # JSON body, never in a header: spaces and accented letters are fine
    UNSENT_SECRETS: ClassVar[frozenset[str]] = ParleySettings.UNSENT_SECRETS | {"web_chat_token"}

    web_chat_enabled: bool | None = None  # None: on when no platform channel is configured
    web_chat_token: SecretStr | None = None
    web_chat_secret: SecretStr | None = (
        None  # cookie signing key; default: generated, kept in Redis
    )
    host: str = ""  # HOST (as the core reads it): the Host names the chat answers to

    @field_validator("web_chat_token")
    @classmethod
    def _passphrase(cls, v: SecretStr | None) -> SecretStr | None:
        """Surrounding whitespace (a paste's newline) removed, blank = unset; NFC, as
        a browser sends what is typed (an accent decomposed in the variable matches)."""
        raw = unicodedata.normalize("NFC", v.get_secret_value().strip()) if v else ""
        return SecretStr(raw) if raw else None


def thread_for(session_id: str) -> ThreadKey:
    return ThreadKey("web", "local", session_id, "")


def _error(status: int, text: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": text, **extra}, status_code=status)


class WebChannel(Channel):
    name = "web"

    def __init__(self, settings: WebSettings, deps: ChannelDeps) -> None:
        self.settings = settings
        self.redis: Redis = deps.redis
        self.blocking: Redis | None = None
        self.hosts = HostPolicy.build(settings.host, deps.public_url)
        self.throttle = LoginThrottle(deps.redis)
        self.conversations = Conversations(deps.redis)
        self._outbox = LocalOutbox(deps.redis, "web")
        self._sessions: Sessions | None = None
        self._closing = asyncio.Event()
        self._secret = b""
        self._key_checked = 0.0
        self._failure_checked = 0.0
        self._refused_hosts: set[str] = set()

    def outbox(self) -> Outbox:
        return self._outbox

    def use_blocking_client(self, blocking: Redis) -> None:
        self.blocking = blocking

    async def initialize(self) -> None:
        if self.settings.web_chat_secret is not None:
            secret = self.settings.web_chat_secret.get_secret_value()
            self._sessions = Sessions(secret)
            self._secret = secret.encode()
        else:
            # One key shared by every web process, created once and kept in Redis.
            await self.sync_key(secrets.token_urlsafe(32))
        token = self.settings.web_chat_token
        if token is not None and len(token.get_secret_value()) < MIN_TOKEN_CHARS:
            log.warning(
                "WEB_CHAT_TOKEN is %d characters long: use at least %d random ones "
                "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))')",
                len(token.get_secret_value()),
                MIN_TOKEN_CHARS,
            )
        if not self.hosts.loopback and token is None and not self.hosts.names:
            log.warning(
                "the web chat answers only to localhost and IP addresses: set PUBLIC_URL "
                "(or WEB_CHAT_TOKEN) to open it by a host name"
            )

    async def sync_key(self, own: str | None = None) -> None:
        """Take the cookie key Redis holds (setting ``own``, this process's, if none).

        Every web process must sign with the same key.  The key in Redis has no TTL
        but can still be lost (a wipe, a failover without persistence, eviction):
        a process started before keeps its key, one started after makes another.
        So each process does this again every :data:`KEY_CHECK_SECS` and when a
        cookie fails to verify, and switches to what Redis holds; the key it had
        goes to the retired keys (in Redis too, for :data:`COOKIE_MAX_AGE`), which
        every process still verifies with: a switch logs no one out.  Raises
        ``RedisError`` (or ``RuntimeError`` when the key cannot be read back).
        """
        own = own or self.sessions.secret
        for _ in range(3):
            oldest = int((time.time() - COOKIE_MAX_AGE) * 1000)
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(SECRET_KEY, own, nx=True)
                pipe.get(SECRET_KEY)
                pipe.zremrangebyscore(RETIRED_KEY, "-inf", f"({oldest}")
                pipe.zrange(RETIRED_KEY, -RETIRED_MAX, -1)
                _, raw, _, retired_raw = await pipe.execute()
            if raw:
                break
        else:
            raise RuntimeError("the web chat's cookie key could not be stored in Redis")
        current = raw.decode()
        retired = {r.decode() for r in retired_raw or ()}
        mine = self._sessions.secret if self._sessions is not None else None
        if mine is not None and current != mine:
            log.warning(
                "web chat: the cookie key in Redis changed (was it wiped or failed over?); "
                "switching to it, and still accepting cookies signed with the previous one"
            )
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zadd(RETIRED_KEY, {mine: int(time.time() * 1000)}, nx=True)
                pipe.zremrangebyrank(RETIRED_KEY, 0, -RETIRED_MAX - 1)
                pipe.expire(RETIRED_KEY, COOKIE_MAX_AGE)  # the newest member's time
                await pipe.execute()
            retired.add(mine)
        if self._sessions is None or current != mine or retired != set(self._sessions.retired):
            self._sessions = Sessions(current, sorted(retired))
            self._secret = current.encode()
        self._key_checked = time.monotonic()

    async def _check_key(self, *, failed: bool = False) -> bool:
        """Sync the cookie key when it is due (or, after a cookie failed to verify,
        at most once a second).  Whether the key set changed."""
        if self.settings.web_chat_secret is not None:
            return False  # WEB_CHAT_SECRET is the key
        now = time.monotonic()
        if failed:
            if now - self._failure_checked < 1.0:
                return False  # a flood of bad cookies costs Redis one look a second
            self._failure_checked = now
        elif now - self._key_checked < KEY_CHECK_SECS:
            return False
        before = self._sessions
        self._key_checked = now
        try:
            await self.sync_key()
        except (RedisError, RuntimeError):
            log.debug("web chat: could not check the cookie key", exc_info=True)
            return False
        return self._sessions is not before

    async def _read(self, request: Request) -> tuple[dict[str, Any], bool]:
        await self._check_key()
        data, dirty = self.sessions.read(request)
        if not data and request.cookies.get(COOKIE) and await self._check_key(failed=True):
            data, dirty = self.sessions.read(request)  # signed with a key learnt just now
        if self.sessions.refresh_login(data, self.settings.web_chat_token):
            dirty = True  # the login, proven under a retired key, signed again too
        return data, dirty

    async def shutdown(self) -> None:
        self.close_streams()

    # -- who may ask -------------------------------------------------------
    def gate(self, scope: Scope) -> Response | None:
        """None for a host name the chat answers to, else the 403 (DNS rebinding)."""
        name = request_host(scope)
        token_set = self.settings.web_chat_token is not None
        if self.hosts.allows(name, token_set=token_set):
            return None
        shown = (name or "")[:100]
        if shown not in self._refused_hosts and len(self._refused_hosts) < 100:
            self._refused_hosts.add(shown)
            log.warning(
                "web chat: refused a request for host %r (it answers to %s); "
                "a page on another site may be trying to reach it",
                shown,
                self.hosts.describe(),
            )
        remedy = self.hosts.remedy(name, token_set=token_set)
        return refusal(scope, name, self.hosts.describe(), remedy)

    def metrics_gate(self, scope: Scope) -> Response | None:
        """/metrics: open to any Host for a scraper (Prometheus asks for ``parley:8000``
        or ``parley.default.svc``, and sends neither ``Sec-Fetch-Site`` nor ``Origin``);
        a browser's request must come from no other site and, made by a page, name a
        host the chat answers to: a DNS-rebound page is same-origin with its own name,
        which the chat does not answer to."""
        headers = Headers(scope=scope)
        site = headers.get("sec-fetch-site")
        origin = headers.get("origin")
        if site is None and origin is None:
            return None  # not a browser's fetch: a scraper, by whatever name it uses
        if site in ("cross-site", "same-site"):
            return PlainTextResponse(
                "/metrics is not readable from another site's page.\n", status_code=403
            )
        if origin is not None:
            token_set = self.settings.web_chat_token is not None
            if not self.hosts.allows(host_of(urlsplit(origin).netloc), token_set=token_set):
                return PlainTextResponse(
                    f"/metrics is not readable from a page of {origin[:100]!r}.\n",
                    status_code=403,
                )
        if site == "none" and origin is None:
            return None  # typed in the address bar: no page asked for it
        return self.gate(scope)

    @property
    def sessions(self) -> Sessions:
        assert self._sessions is not None, "initialize() first"
        return self._sessions

    def _logged_in(self, data: dict[str, Any]) -> bool:
        return self.sessions.logged_in(data, self.settings.web_chat_token)

    async def _session(self, request: Request) -> tuple[dict[str, Any], bool]:
        """(the cookie session, made or refreshed now: set the cookie)."""
        data, dirty = await self._read(request)
        if not isinstance(data.get("sid"), str):
            data = {"sid": secrets.token_urlsafe(12)}
            dirty = True
        if not isinstance(data.get("uid"), str):
            data["uid"] = data["sid"]  # cookies from before uid existed: keep the same user
            dirty = True
        return data, dirty

    async def _existing(self, request: Request) -> dict[str, Any] | None:
        """The cookie session, or None when the page was never loaded."""
        return (await self._existing_signed(request))[0]

    async def _existing_signed(self, request: Request) -> tuple[dict[str, Any] | None, bool]:
        """(the cookie session or None, whether the cookie should be signed again)."""
        data, dirty = await self._read(request)
        if not isinstance(data.get("sid"), str):
            return None, False
        data.setdefault("uid", data["sid"])
        return data, dirty

    def _next_sid(self, uid: str, client_id: str | None) -> str:
        """The conversation id ``/new`` moves to.

        Derived from the message id when the page gave one, so a resend of the same
        ``/new`` (a retry after a lost response) lands in the same new conversation.
        Not from the cookie key, which may change between the two (``sync_key``):
        from this browser's ``uid``, known only to its cookie.
        """
        if client_id is None:
            return secrets.token_urlsafe(12)
        digest = hashlib.sha256(f"parley-web-new\x00{uid}\x00{client_id}".encode()).digest()
        return base64.urlsafe_b64encode(digest[:12]).decode()

    async def _shown(self, data: dict[str, Any], given: Any) -> str | Response:
        """The conversation the page shows (``thread``), if this browser has it.

        None given: the cookie's current one.  One of this browser's recent
        conversations (a tab opened before another tab started a new one): that.
        Anything else: 409, and the page reloads the current conversation.
        """
        current = data["sid"]
        if given is None:
            return current
        if not isinstance(given, str) or len(given) > 200:
            return _error(400, "'thread' must be the conversation the page shows")
        if given == str(thread_for(current)):
            return current
        try:
            key = ThreadKey.parse(given)
        except ValueError:
            key = None
        if (
            key is not None
            and (key.channel, key.tenant, key.thread) == ("web", "local", "")
            and SESSION_ID.match(key.conversation)
        ):
            try:
                if await self.conversations.has(data["uid"], key.conversation):
                    return key.conversation
            except RedisError:
                return _error(503, STORE_DOWN)
        return _error(
            409,
            "this tab shows a conversation that was replaced (in another tab?): reload it",
            thread=str(thread_for(current)),
        )

    # -- routes ------------------------------------------------------------
    def routes(self, ingest: Ingest) -> list[BaseRoute]:
        async def page(request: Request) -> Response:
            data, dirty = await self._session(request)
            resp = Response(PAGE, media_type="text/html", headers={"Cache-Control": "no-store"})
            if dirty:
                self.sessions.write(request, resp, data)
            return resp

        async def me(request: Request) -> Response:
            data, dirty = await self._session(request)
            resp = JSONResponse(
                {"needs_token": not self._logged_in(data), "thread": str(thread_for(data["sid"]))}
            )
            if dirty:
                self.sessions.write(request, resp, data)
            return resp

        async def login(request: Request) -> Response:
            body = await json_body(request)
            if isinstance(body, Response):
                return body
            data, _ = await self._session(request)
            token = self.settings.web_chat_token
            resp = JSONResponse({"ok": True})
            if token is None:  # nothing to prove, and nothing kept that a token would honour
                data.pop("tk", None)
                self.sessions.write(request, resp, data)
                return resp
            client = client_ip(request)
            try:
                wait = await self.throttle.attempt(client)
            except RedisError:
                return _error(503, STORE_DOWN)
            if wait:
                return JSONResponse(
                    {"error": f"too many attempts: try again in {wait} s"},
                    status_code=429,
                    headers={"Retry-After": str(wait)},
                )
            given = body.get("token")
            if not (
                isinstance(given, str)
                and hmac.compare_digest(
                    unicodedata.normalize("NFC", given).encode(),
                    token.get_secret_value().encode(),
                )
            ):
                return _error(403, "wrong token")
            with contextlib.suppress(RedisError):
                await self.throttle.succeeded(client)
            data["tk"] = self.sessions.token_digest(token.get_secret_value())
            self.sessions.write(request, resp, data)
            return resp

        async def history(request: Request) -> Response:
            data = await self._existing(request)
            if data is None:
                return JSONResponse({"messages": [], "last": "0-0"})
            if not self._logged_in(data):
                return _error(401, "token required")
            sid = await self._shown(data, request.query_params.get("thread"))
            if isinstance(sid, Response):
                return sid
            thread = thread_for(sid)
            try:
                messages, last = await read_transcript(self.redis, thread)
            except RedisError:
                log.warning("[%s] could not read the transcript (storage unavailable)", thread)
                return _error(503, STORE_DOWN)
            return JSONResponse({"messages": messages, "last": last, "thread": str(thread)})

        async def post_message(request: Request) -> Response:
            data, dirty = await self._existing_signed(request)
            if data is None:
                return _no_session()
            if not self._logged_in(data):
                return _error(401, "token required")
            signed = data  # the session as the cookie holds it
            body = await json_body(request)
            if isinstance(body, Response):
                return body
            text = body.get("text")
            if not isinstance(text, str) or not text.strip():
                return _error(400, "'text' must be a non-empty string")
            if len(text) > MAX_TEXT:
                return _error(413, f"message longer than {MAX_TEXT} characters")
            client_id = body.get("id")
            if client_id is not None and not (
                isinstance(client_id, str) and CLIENT_ID.match(client_id)
            ):
                return _error(400, "'id' must be 8-40 of [A-Za-z0-9_-]")
            sid = await self._shown(data, body.get("thread"))
            if isinstance(sid, Response):
                return sid
            sub = parse(text)
            new_conversation = isinstance(sub, Command) and sub.name == "new"
            if new_conversation:
                # "/new starts another": a fresh thread for this browser; the command
                # runs there, so the agent's confirmation opens the new transcript.
                # Tabs that still show the earlier ones may go on with them.
                new_sid = self._next_sid(data["uid"], client_id)
                try:
                    await self.conversations.remember(data["uid"], sid, data["sid"], new_sid)
                except RedisError:
                    return _error(503, STORE_DOWN)
                sid = new_sid
                data = {**data, "sid": new_sid}
            event = InboundEvent(
                # the page's id makes a retry idempotent; scoped to this browser so
                # that no one else's id can collide with (or pre-empt) it
                event_id=f"{data['uid']}.{client_id}" if client_id else secrets.token_hex(8),
                kind=EventKind.MESSAGE,
                channel="web",
                thread=thread_for(sid),
                user_id=data["uid"],
                user_name="you",
                text=text,
            )
            resp = await self._submit(ingest, event, record=True)
            if new_conversation and resp.status_code < 300:
                self.sessions.write(request, resp, data)
            elif dirty:  # a tab in use keeps its cookie alive, as the page and /api/me do
                self.sessions.write(request, resp, signed)
            return resp

        async def post_action(request: Request) -> Response:
            data, dirty = await self._existing_signed(request)
            if data is None:
                return _no_session()
            if not self._logged_in(data):
                return _error(401, "token required")
            body = await json_body(request)
            if isinstance(body, Response):
                return body
            token = body.get("token")
            if not isinstance(token, str) or not token or len(token) > 64 or not token.isascii():
                return _error(400, "'token' must be a button payload")
            if body.get("thread") is None:
                # a press goes to the conversation its button is in, never to a guess
                return _error(409, "reload the page: the press did not say its conversation")
            sid = await self._shown(data, body.get("thread"))
            if isinstance(sid, Response):
                return sid
            event = InboundEvent(
                event_id=secrets.token_hex(8),
                kind=EventKind.ACTION,
                channel="web",
                thread=thread_for(sid),
                user_id=data["uid"],
                user_name="you",
                action=Action(token),
            )
            resp = await self._submit(ingest, event, record=False)
            if dirty:
                self.sessions.write(request, resp, data)
            return resp

        async def events(request: Request) -> Response:
            data = await self._existing(request)
            if data is None:
                return _no_session()
            if not self._logged_in(data):
                return _error(401, "token required")
            resumed = request.headers.get("last-event-id")
            after = resumed or request.query_params.get("after") or "$"
            if after != "$" and not _valid_entry_id(after):
                return _error(400, "bad 'after' id")
            given = request.query_params.get("thread")
            if given is None and resumed:
                # the browser resumes an id of the conversation the page showed, which
                # the cookie may no longer name: never continue with another one
                return _error(409, "say which conversation to resume ('thread')")
            sid = await self._shown(data, given)
            if isinstance(sid, Response):
                return sid
            return StreamingResponse(
                self._sse(thread_for(sid), after, request),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )

        gate = self.gate
        return [
            Route("/", secured(page, gate), methods=["GET"]),
            Route("/api/me", secured(me, gate), methods=["GET"]),
            Route("/api/login", secured(login, gate), methods=["POST"]),
            Route("/api/history", secured(history, gate), methods=["GET"]),
            Route("/api/messages", secured(post_message, gate), methods=["POST"]),
            Route("/api/actions", secured(post_action, gate), methods=["POST"]),
            Route("/api/events", secured(events, gate), methods=["GET"]),
            Mount("/static", app=SecuredApp(StaticFiles(directory=STATIC), gate), name="static"),
        ]

    async def _retract(self, event: InboundEvent, recorded: bool) -> None:
        if recorded:
            with contextlib.suppress(RedisError):
                await self._outbox.retract_user(event.thread, event.event_id)

    async def _submit(self, ingest: Ingest, event: InboundEvent, *, record: bool) -> Response:
        # The user's message goes into the transcript *before* it is published: a
        # worker can answer within milliseconds (an open circuit breaker, a
        # command), and the answer must never show above the question.  A message
        # the store then refuses or cannot take is retracted again, unless the
        # transcript held it before this request: a retry of a message that may
        # have been accepted (its response lost) never takes the question back.
        recorded = False
        if record:
            try:
                recorded = not await self._outbox.record_user(event.thread, event)
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
        yield b"retry: 2000\n\n"
        while last == "$" and not self._closing.is_set():
            # Resolve '$' now, so nothing added between two blocking reads is missed.
            try:
                info = await self.redis.xrevrange(stream, count=1)
            except RedisError:
                await asyncio.sleep(1.0)
                continue
            last = info[0][0].decode() if info else "0-0"
        if last != "0-0" and await self._gap(stream, last):
            # Entries after `last` may be gone (the live stream is capped and expires):
            # the page reloads the transcript instead of missing them.
            yield b'data: {"t":"reload"}\n\n'
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

    async def _gap(self, stream: str, after: str) -> bool:
        """Whether the stream no longer holds the entry ``after`` (nor anything before)."""
        try:
            first = await self.redis.xrange(stream, count=1)
        except RedisError:
            return False
        return not first or _entry_key(first[0][0].decode()) > _entry_key(after)


def _no_session() -> JSONResponse:
    # The cookie is gone (cleared, or older than COOKIE_MAX_AGE): the page starts again
    # (GET /api/me makes a new session) when it sees ``no_session``.
    return _error(400, "no session; load the page first", no_session=True)


def _maybe_json(v: bytes) -> Any:
    if v[:1] in (b"{", b"["):
        try:
            return orjson.loads(v)
        except orjson.JSONDecodeError:
            pass
    return v.decode(errors="replace")


_ENTRY_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?", re.ASCII)


def _valid_entry_id(s: str) -> bool:
    """A stream id Redis takes: ``ms`` or ``ms-seq``, each below 2**64 (anything else
    would make every read fail: the request gets a 400 instead)."""
    m = _ENTRY_ID.fullmatch(s)
    return m is not None and all(int(g) < 2**64 for g in m.groups() if g is not None)


def _entry_key(s: str) -> tuple[int, int]:
    a, _, b = s.partition("-")
    return int(a), int(b or 0)


def status(
    settings: WebSettings,
    platforms_enabled: bool | Sequence[str],
    *,
    hosted: bool = False,
    incomplete: Sequence[str] = (),
) -> tuple[bool, str]:
    """On?, and why (the start-up summary prints it in parentheses: none inside).
    ``platforms_enabled``: the platform channels that are on (or whether any is);
    ``incomplete``: those that are off though partly configured (a token alone)."""
    if settings.web_chat_enabled is True:
        if hosted and settings.web_chat_token is None:
            return True, (
                "WEB_CHAT_ENABLED=true, without WEB_CHAT_TOKEN: anyone who can reach it can chat"
            )
        return True, "WEB_CHAT_ENABLED=true"
    if settings.web_chat_enabled is False:
        return False, "WEB_CHAT_ENABLED=false"
    if platforms_enabled:
        names = [] if isinstance(platforms_enabled, bool) else list(platforms_enabled)
        which = " and ".join(names) or "a platform channel"
        verb = "are" if len(names) > 1 else "is"
        return False, f"{which} {verb} configured; set WEB_CHAT_ENABLED=true to keep it"
    if hosted:
        return (
            False,
            "listening beyond this machine (HOST, or $DYNO set); set WEB_CHAT_ENABLED=true to expose it",
        )
    if incomplete:
        off = " and ".join(incomplete)
        return True, f"no platform channel is on: {off} is set up only in part, see its line"
    return True, "no platform configured"


def create(settings: WebSettings, deps: ChannelDeps) -> WebChannel:
    return WebChannel(settings, deps)


SETTINGS = WebSettings
