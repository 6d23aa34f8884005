"""A fake Discord (REST API + gateway websocket) that the real discord.py talks to.

Point ``DISCORD_API_BASE_URL`` at ``fake.api_base`` and ``DISCORD_GATEWAY_URL``
at ``fake.gateway_url``.  One aiohttp server on 127.0.0.1 serves both.

REST (``/api/v10``): ``GET /users/@me``, ``GET /oauth2/applications/@me``,
``GET /gateway[/bot]``, ``GET|POST /channels/{id}/messages``,
``PATCH|DELETE /channels/{id}/messages/{id}``, ``POST /channels/{id}/typing``,
``POST /channels/{id}/messages/{id}/threads``, ``GET /channels/{id}``,
``POST /interactions/{id}/{token}/callback``, ``POST /webhooks/{app}/{token}``,
``GET|PUT /applications/{app}/commands`` (global slash commands, stored per
application in ``app_commands`` and checked as Discord does: see
``tests/fakes/discord_commands.py``; ``command_puts`` counts the PUTs).
It enforces what Parley depends on: the bot token (401), 2,000 characters and
no empty message (400, code 50035), ``custom_id`` at most 100 characters, one
callback per interaction (400, code 40060; a visible response becomes the bot's
message in the channel, type 20 under a slash command), 429 responses shaped like
Discord's (``Via`` header, ``retry_after`` body) when scripted, and message
``nonce`` (at most 25 characters): with ``enforce_nonce`` a second create with the
same nonce within ``nonce_window_secs`` returns the first message instead of
creating another.

Gateway (``/gateway``): HELLO, IDENTIFY -> READY + GUILD_CREATE, heartbeats and
ACKs, RESUME (replays missed events, then RESUMED) or INVALID_SESSION when the
session is gone, dispatches MESSAGE_CREATE / THREAD_CREATE / INTERACTION_CREATE,
and the 4004 / 4014 close codes.  It speaks what discord.py asks for: JSON text
frames, or ``compress=zlib-stream`` transport compression.

Scriptable: ``user_message`` (a person writes; ``dispatch=False`` keeps it off
the gateway, as if said while disconnected), ``press`` (a button press),
``slash`` (a person invokes a registered slash command; an unregistered name
raises, as Discord never sends one), ``redeliver`` (an interaction again),
``invalidate_sessions`` (a non-resumable disconnect), ``drop_connections``
(an abrupt close: the client resumes), ``rate_limit`` / ``fail`` (inject 429s
and errors; ``fail(..., after=True)`` does the call, then answers the error, like a
proxy timing out on a request the API completed), ``wait_call``.  Every REST call is recorded in ``calls``.

Standalone: ``python -m tests.fakes.discord --port 8082`` prints the URLs.
Control endpoints for other processes: ``POST /_fake/message``
(``{"channel_id", "content", "user_id"?, "mention": bool}``), ``POST /_fake/press``
(``{"message_id", "custom_id", "user_id"?}``), ``GET /_fake/calls``,
``POST /_fake/invalidate``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.discord_gateway import Connection, GatewayMixin, Session
from tests.fakes.discord_interactions import (
    InteractionsMixin,
    _Error,
    _json,
    _now_iso,
)

TOKEN = "MTIzNDU2Nzg5.fake.discord-bot-token"
BOT_ID = "1100000000000000001"
APP_ID = "1100000000000000001"
GUILD_ID = "1200000000000000001"
CHANNEL_ID = "1300000000000000001"  # a guild text channel
OTHER_CHANNEL_ID = "1300000000000000002"
DM_CHANNEL_ID = "1400000000000000001"
ALICE = {
    "id": "1500000000000000001",
    "username": "alice",
    "global_name": "Alice",
    "discriminator": "0",
    "avatar": None,
}
BOB = {
    "id": "1500000000000000002",
    "username": "bob",
    "global_name": "Bob",
    "discriminator": "0",
    "avatar": None,
}
DISCORD_EPOCH = 1420070400000


@dataclass
class Call:
    method: str
    path: str
    json: Any
    query: dict[str, str]
    at: float = field(default_factory=time.monotonic)
    status: int = 200


@dataclass
class Script:
    """An injected response for matching calls."""

    method: str
    pattern: re.Pattern[str]
    status: int
    body: Any
    headers: dict[str, str]
    times: int
    after: bool = False  # do the call, then answer the error anyway
    skip: int = 0  # matching calls served normally before this script applies


class FakeDiscord(GatewayMixin, InteractionsMixin):
    def __init__(
        self,
        *,
        token: str = TOKEN,
        message_content: bool = True,
        heartbeat_interval_ms: int = 41_250,
    ) -> None:
        self.token = token
        self.app_id = APP_ID
        self.message_content = message_content
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.bot_user = {
            "id": BOT_ID,
            "username": "parley",
            "global_name": None,
            "discriminator": "0",
            "avatar": None,
            "bot": True,
        }
        self.calls: list[Call] = []
        self.stall: dict[str, float] = {}  # HTTP method -> seconds before answering (once)
        self.stall_every: dict[str, float] = {}  # the same, for every call
        self.scripts: list[Script] = []
        self.nonces: dict[tuple[str, str], tuple[float, str]] = {}  # -> (created at, id)
        self.nonce_window_secs = 300.0  # "the past few minutes"
        self.guilds: dict[str, dict[str, Any]] = {GUILD_ID: {"id": GUILD_ID, "name": "Test Guild"}}
        self.channels: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, dict[str, dict[str, Any]]] = {}  # channel -> id -> message
        self.interactions: dict[str, dict[str, Any]] = {}  # id -> payload (+ "_at", "_answered")
        self.app_commands: dict[str, list[dict[str, Any]]] = {}  # app id -> global commands
        self.command_puts = 0  # bulk overwrites asked for (Discord allows 200 creations a day)
        self.sessions: dict[str, Session] = {}
        self.connections: list[Connection] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.transports: list[str] = []  # "zlib-stream" / "none", per connection
        self.files: dict[str, tuple[bytes, str, float]] = {}  # CDN path -> (data, type, expiry)
        # the bot's permissions in a channel (interactions' app_permissions); default below
        self.bot_permissions: dict[str, int] = {}
        self.file_gets: list[str] = []  # CDN paths asked for
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.add_channel(CHANNEL_ID, guild_id=GUILD_ID, name="general")
        self.add_channel(OTHER_CHANNEL_ID, guild_id=GUILD_ID, name="random")
        self.add_channel(DM_CHANNEL_ID, guild_id="", name="")

    # --- server ---------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return self.url + "/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    async def start(self, port: int = 0) -> FakeDiscord:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        app.router.add_get("/attachments/{path:.*}", self._cdn)
        app.router.add_post("/_fake/message", self._ctl_message)
        app.router.add_post("/_fake/press", self._ctl_press)
        app.router.add_post("/_fake/invalidate", self._ctl_invalidate)
        app.router.add_get("/_fake/calls", self._ctl_calls)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def stop(self) -> None:
        for conn in list(self.connections):
            await conn.ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- ids and objects --------------------------------------------------------

    def snowflake(self) -> str:
        ms = int(time.time() * 1000) - DISCORD_EPOCH
        return str((ms << 22) | (next(self._ids) & 0x3FFFFF))

    def add_channel(
        self,
        channel_id: str,
        *,
        guild_id: str,
        name: str = "",
        parent_id: str = "",
        owner_id: str = "",
    ) -> dict[str, Any]:
        if not guild_id:
            ch: dict[str, Any] = {
                "id": channel_id,
                "type": 1,
                "recipients": [ALICE],
                "last_message_id": None,
            }
        elif parent_id:
            ch = {
                "id": channel_id,
                "type": 11,
                "guild_id": guild_id,
                "parent_id": parent_id,
                "owner_id": owner_id or BOT_ID,
                "name": name or "thread",
                "rate_limit_per_user": 0,
                "message_count": 0,
                "member_count": 1,
                "flags": 0,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": _now_iso(),
                    "locked": False,
                },
            }
        else:
            ch = {
                "id": channel_id,
                "type": 0,
                "guild_id": guild_id,
                "name": name or "channel",
                "position": len(self.channels),
                "permission_overwrites": [],
                "nsfw": False,
                "parent_id": None,
                "topic": None,
                "last_message_id": None,
                "rate_limit_per_user": 0,
            }
        self.channels[channel_id] = ch
        self.messages.setdefault(channel_id, {})
        return ch

    def guild_of(self, channel_id: str) -> str:
        return str(self.channels.get(channel_id, {}).get("guild_id") or "")

    def _guild_payload(self, guild_id: str) -> dict[str, Any]:
        channels = []
        threads = []
        for ch in self.channels.values():
            if ch.get("guild_id") != guild_id:
                continue
            (threads if ch["type"] == 11 else channels).append(ch)
        return {
            "id": guild_id,
            "name": self.guilds[guild_id]["name"],
            "icon": None,
            "owner_id": ALICE["id"],
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [
                {
                    "id": guild_id,
                    "name": "@everyone",
                    "permissions": "1071698660929",
                    "position": 0,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                }
            ],
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "joined_at": _now_iso(),
            "large": False,
            "unavailable": False,
            "member_count": 3,
            "voice_states": [],
            "members": [],
            "channels": channels,
            "threads": threads,
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "nsfw_level": 0,
        }

    def _message(
        self,
        channel_id: str,
        author: dict[str, Any],
        content: str,
        *,
        mentions: list[dict[str, Any]] | None = None,
        components: list[Any] | None = None,
        reference: dict[str, Any] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        message_id: str | None = None,
    ) -> dict[str, Any]:
        msg: dict[str, Any] = {
            "id": message_id or self.snowflake(),
            "channel_id": channel_id,
            "author": {"discriminator": "0", "avatar": None, **author},
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions or [],
            "mention_roles": [],
            "attachments": [
                {"size": 0, "proxy_url": a.get("url", ""), "url": "", **a}
                for a in attachments or ()
            ],
            "embeds": [],
            "pinned": False,
            "type": 19 if reference else 0,
            "flags": 0,
            "components": components or [],
        }
        if reference:
            msg["message_reference"] = {"message_id": reference["id"], "channel_id": channel_id}
            msg["referenced_message"] = reference
        self.messages.setdefault(channel_id, {})[msg["id"]] = msg
        return msg

    def add_file(
        self,
        channel_id: str,
        filename: str,
        data: bytes,
        content_type: str = "image/png",
        *,
        expires_in: float = 86_400,
    ) -> dict[str, Any]:
        """A file uploaded to the CDN; the attachment object for ``user_message``.

        Like Discord's, the URL is signed and expires (``ex``, hex seconds): after
        that the CDN answers 404.
        """
        att_id = self.snowflake()
        path = f"/attachments/{channel_id}/{att_id}/{filename}"
        ex = int(time.time() + expires_in)
        self.files[path] = (data, content_type, ex)
        url = f"{self.url}{path}?ex={ex:x}&is={int(time.time()):x}&hm={att_id[-8:]}&"
        return {
            "id": att_id,
            "filename": filename,
            "content_type": content_type,
            "size": len(data),
            "url": url,
            "proxy_url": url,
        }

    async def _cdn(self, request: web.Request) -> web.Response:
        path = request.path
        self.file_gets.append(path)
        entry = self.files.get(path)
        try:
            ex = int(request.query.get("ex", ""), 16)
        except ValueError:
            ex = 0
        if entry is None or ex != entry[2] or time.time() > entry[2]:
            return web.Response(status=404, text="This content is no longer available.")
        return web.Response(body=entry[0], content_type=entry[1])

    def _with_guild(self, msg: dict[str, Any]) -> dict[str, Any]:
        guild_id = self.guild_of(msg["channel_id"])
        return {**msg, "guild_id": guild_id} if guild_id else dict(msg)

    # --- scripting ----------------------------------------------------------------

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        body: Any = None,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
        after: bool = False,
        skip: int = 0,
    ) -> None:
        """The next ``times`` calls matching (method, path regex) answer ``status``
        (``after``: once the call has been carried out; ``skip``: after that many
        matching calls have been served normally).  ``status`` 0: the connection
        is closed with no answer (aiohttp's ServerDisconnectedError)."""
        self.scripts.append(
            Script(
                method.upper(),
                re.compile(path),
                status,
                body if body is not None else {"message": "scripted failure", "code": 0},
                headers or {},
                times,
                after,
                skip,
            )
        )

    def rate_limit(
        self,
        method: str,
        path: str,
        retry_after: float,
        *,
        times: int = 1,
        is_global: bool = False,
        scope: str = "user",
    ) -> None:
        """429s as Discord sends them: ``retry_after`` (float) in the body,
        ``Retry-After`` in whole seconds, rounded up; ``scope`` is
        ``X-RateLimit-Scope`` (``user``: the bot's own limit on the route,
        ``shared``: a limit on the resource; ``global`` with ``is_global``)."""
        self.fail(
            method,
            path,
            429,
            {
                "message": "You are being rate limited.",
                "retry_after": retry_after,
                "global": is_global,
            },
            times=times,
            headers={
                "Via": "1.1 google",
                "Retry-After": str(math.ceil(retry_after)),
                "X-RateLimit-Limit": "5",
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset-After": f"{retry_after}",
                "X-RateLimit-Bucket": "fakebucket",
                "X-RateLimit-Scope": "global" if is_global else scope,
                **({"X-RateLimit-Global": "true"} if is_global else {}),
            },
        )

    def calls_to(self, method: str, path: str = "") -> list[Call]:
        pat = re.compile(path)
        return [c for c in self.calls if c.method == method.upper() and pat.search(c.path)]

    async def wait_call(
        self, method: str, path: str = "", *, count: int = 1, within: float = 5.0
    ) -> list[Call]:
        """Until ``count`` calls matched; returns them all."""
        await self.wait(
            lambda: len(self.calls_to(method, path)) >= count,
            within,
            f"{count}x {method} {path}",
        )
        return self.calls_to(method, path)

    async def wait(self, cond: Any, within: float = 5.0, what: str = "condition") -> bool:
        deadline = time.monotonic() + within
        while not cond():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"fake discord: timed out waiting for {what}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.05))
        return True

    def _poke(self) -> None:
        self._changed.set()

    async def wait_ready(self, count: int = 1, within: float = 10.0) -> None:
        """Until ``count`` IDENTIFYs were answered with READY."""
        await self.wait(lambda: len(self.identifies) >= count, within, f"{count} IDENTIFY")

    # --- gateway events -------------------------------------------------------------

    async def user_message(
        self,
        channel_id: str,
        content: str,
        *,
        user: dict[str, Any] = ALICE,
        mention: bool = False,
        reply_to: str = "",
        attachments: list[dict[str, Any]] | None = None,
        dispatch: bool = True,
    ) -> dict[str, Any]:
        """A person writes in ``channel_id`` (``mention``: prefixes ``<@bot>``)."""
        if mention:
            content = f"<@{BOT_ID}> {content}"
        reference = self.messages.get(channel_id, {}).get(reply_to) if reply_to else None
        msg = self._message(
            channel_id,
            user,
            content,
            mentions=[self.bot_user] if mention else [],
            reference=reference,
            attachments=attachments,
        )
        if dispatch:
            await self.dispatch("MESSAGE_CREATE", self._with_guild(msg), self.guild_of(channel_id))
        return msg

    async def press(
        self, message_id: str, custom_id: str, *, user: dict[str, Any] = ALICE, nick: str = ""
    ) -> dict[str, Any]:
        """A button press (INTERACTION_CREATE type 3) on a stored message (``nick``:
        the presser's server nickname)."""
        msg = next((m[message_id] for m in self.messages.values() if message_id in m), None)
        if msg is None:
            raise KeyError(f"no message {message_id}")
        data = {"custom_id": custom_id, "component_type": 2}
        return await self._interact(3, msg["channel_id"], data, user, message=msg, nick=nick)

    async def slash(
        self,
        channel_id: str,
        name: str,
        text: str | None = None,
        *,
        user: dict[str, Any] = ALICE,
        context: int | None = None,
    ) -> dict[str, Any]:
        """``user`` invokes the slash command ``/name`` (``text``: its ``text`` option)
        in ``channel_id`` (INTERACTION_CREATE type 2).  Only a registered command, and
        only an option it has, can be invoked: Discord offers nothing else."""
        cmd = self.command(name)
        if cmd is None:
            raise KeyError(f"/{name} is not a registered command of the application")
        data: dict[str, Any] = {"id": cmd["id"], "name": name, "type": cmd["type"]}
        if text is not None:
            if not any(o["name"] == "text" for o in cmd.get("options") or ()):
                raise KeyError(f"/{name} has no option 'text'")
            data["options"] = [{"name": "text", "type": 3, "value": text}]
        return await self._interact(2, channel_id, data, user, context=context)

    # --- REST -----------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        method = request.method
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            if raw:
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    body = raw.decode(errors="replace")
        call = Call(method, path, body, dict(request.query))
        self.calls.append(call)
        try:
            resp = await self._route(request, method, path, body)
        except _Error as err:
            resp = _json(err.body, err.status, err.headers)
        call.status = resp.status
        self._poke()
        stall = self.stall.pop(method, 0.0) or self.stall_every.get(method, 0.0)
        if stall:  # done, but the answer comes too late (the client timed out)
            await asyncio.sleep(stall)
        return resp

    async def _route(self, request: web.Request, method: str, path: str, body: Any) -> web.Response:
        for script in self.scripts:
            if script.times > 0 and script.method == method and script.pattern.search(path):
                if script.skip > 0:
                    script.skip -= 1
                    continue
                script.times -= 1
                if script.after:
                    await self._serve(request, method, path, body)
                if script.status == 0 and request.transport is not None:
                    request.transport.close()  # hang up: nothing comes back
                raise _Error(script.status, script.body, script.headers)
        return await self._serve(request, method, path, body)

    async def _serve(self, request: web.Request, method: str, path: str, body: Any) -> web.Response:
        public = path.startswith(("/interactions/", "/webhooks/"))
        if not public and request.headers.get("Authorization") != f"Bot {self.token}":
            raise _Error(401, {"message": "401: Unauthorized", "code": 0})
        parts = path.strip("/").split("/")
        if path == "/users/@me" and method == "GET":
            return _json(self.bot_user)
        if path == "/oauth2/applications/@me" and method == "GET":
            return _json(self._application())
        if path in ("/gateway", "/gateway/bot") and method == "GET":
            return _json(
                {
                    "url": self.gateway_url,
                    "shards": 1,
                    "session_start_limit": {
                        "total": 1000,
                        "remaining": 999,
                        "reset_after": 0,
                        "max_concurrency": 1,
                    },
                }
            )
        if parts[0] == "channels" and len(parts) >= 2:
            return await self._channels(method, parts[1], parts[2:], body, request)
        if parts[0] == "applications" and len(parts) == 3 and parts[2] == "commands":
            return self._commands(method, parts[1], body)
        if parts[0] == "interactions" and len(parts) == 4 and parts[3] == "callback":
            return await self._callback(parts[1], parts[2], body)
        if parts[0] == "webhooks" and len(parts) >= 3:
            return self._followup(parts[1], parts[2], body)
        raise _Error(404, {"message": "404: Not Found", "code": 0})

    def _application(self) -> dict[str, Any]:
        return {
            "id": APP_ID,
            "name": "Parley",
            "icon": None,
            "description": "",
            "rpc_origins": [],
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": {**ALICE, "discriminator": "0", "avatar": None},
            "summary": "",
            "verify_key": "0" * 64,
            "team": None,
            "flags": self._app_flags(),
            "bot": self.bot_user,
        }

    async def _channels(
        self, method: str, channel_id: str, rest: list[str], body: Any, request: web.Request
    ) -> web.Response:
        if channel_id not in self.channels:
            raise _Error(404, {"message": "Unknown Channel", "code": 10003})
        store = self.messages[channel_id]
        if not rest and method == "GET":
            return _json(self.channels[channel_id])
        if rest == ["typing"] and method == "POST":
            return web.Response(status=204)
        if rest == ["messages"] and method == "GET":
            limit = min(int(request.query.get("limit", "50")), 100)
            after = request.query.get("after")
            before = request.query.get("before")
            ids = sorted(store, key=lambda i: (len(i), i))
            if after:
                ids = [i for i in ids if (len(i), i) > (len(after), after)][:limit]
            else:
                if before:
                    ids = [i for i in ids if (len(i), i) < (len(before), before)]
                ids = ids[-limit:]
            return _json([store[i] for i in reversed(ids)])
        if rest == ["messages"] and method == "POST":
            self._check_message(body)
            nonce = body.get("nonce")
            if nonce is not None and len(str(nonce)) > 25:
                raise _Error(400, {"message": "Invalid Form Body", "code": 50035})
            if nonce is not None and body.get("enforce_nonce"):
                seen = self.nonces.get((channel_id, str(nonce)))
                fresh = seen is not None and time.monotonic() - seen[0] < self.nonce_window_secs
                if seen is not None and fresh and seen[1] in store:
                    return _json(store[seen[1]])
            ref = body.get("message_reference") or {}
            reference = store.get(str(ref.get("message_id", ""))) if ref else None
            if ref and reference is None and ref.get("fail_if_not_exists", True):
                raise _Error(400, {"message": "Unknown message", "code": 50035})
            msg = self._message(
                channel_id,
                self.bot_user,
                body.get("content") or "",
                components=body.get("components") or [],
                reference=reference,
            )
            msg["allowed_mentions"] = body.get("allowed_mentions")
            if nonce is not None:
                msg["nonce"] = nonce
                self.nonces[(channel_id, str(nonce))] = (time.monotonic(), msg["id"])
            await self.dispatch("MESSAGE_CREATE", self._with_guild(msg), self.guild_of(channel_id))
            return _json(msg)
        if len(rest) == 2 and rest[0] == "messages":
            msg = store.get(rest[1])
            if msg is None:
                raise _Error(404, {"message": "Unknown Message", "code": 10008})
            if method == "PATCH":
                self._check_message(body, partial=True)
                for key in ("content", "components", "allowed_mentions"):
                    if key in body:
                        msg[key] = body[key]
                msg["edited_timestamp"] = _now_iso()
                return _json(msg)
            if method == "DELETE":
                del store[rest[1]]
                return web.Response(status=204)
        if len(rest) == 3 and rest[0] == "messages" and rest[2] == "threads" and method == "POST":
            if rest[1] not in store:
                raise _Error(404, {"message": "Unknown Message", "code": 10008})
            guild_id = self.guild_of(channel_id)
            thread = self.add_channel(
                rest[1], guild_id=guild_id, name=(body or {}).get("name", ""), parent_id=channel_id
            )
            await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True}, guild_id)
            return _json(thread, 201)
        raise _Error(404, {"message": "404: Not Found", "code": 0})

    # --- control endpoints (other processes) -------------------------------------------

    async def _ctl_message(self, request: web.Request) -> web.Response:
        d = await request.json()
        user = {"id": d.get("user_id", ALICE["id"]), "username": d.get("username", "user")}
        msg = await self.user_message(
            d.get("channel_id", CHANNEL_ID), d["content"], user=user, mention=bool(d.get("mention"))
        )
        return _json(msg)

    async def _ctl_press(self, request: web.Request) -> web.Response:
        d = await request.json()
        user = {"id": d.get("user_id", ALICE["id"]), "username": d.get("username", "user")}
        return _json(await self.press(d["message_id"], d["custom_id"], user=user))

    async def _ctl_invalidate(self, request: web.Request) -> web.Response:
        await self.invalidate_sessions()
        return web.Response(status=204)

    async def _ctl_calls(self, request: web.Request) -> web.Response:
        return _json(
            [
                {"method": c.method, "path": c.path, "json": c.json, "status": c.status}
                for c in self.calls
            ]
        )


async def _main(port: int) -> None:
    fake = await FakeDiscord().start(port)
    print(f"api_base={fake.api_base} gateway_url={fake.gateway_url} token={fake.token}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(description="Fake Discord REST API + gateway")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.port))


if __name__ == "__main__":
    main()
