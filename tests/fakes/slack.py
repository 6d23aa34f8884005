"""A fake Slack: Web API + Socket Mode endpoint + signed event delivery.

A real aiohttp server on 127.0.0.1 (port 0 by default) that the real
slack_sdk AsyncWebClient (``base_url=fake.api_url``) and Parley's Socket Mode
loop talk to.  It behaves like Slack where Parley depends on it:

* ``auth.test``, ``chat.postMessage`` / ``update`` / ``delete`` /
  ``postEphemeral``, ``reactions.add`` / ``remove``, ``users.info``, ``files.info``
  (Slack Connect files: :mod:`tests.fakes.slack_files`),
  ``apps.connections.open`` (app token; returns this server's websocket URL);
* block limits: 50 blocks, section text 3,000, button value 2,000, action_id
  255, button text 75, 25 elements per actions block, text 40,000;
* 429 + ``Retry-After`` on demand (:meth:`rate_limit`) or when a channel is
  posted to faster than ``channel_interval``;
* ``response_url`` endpoints for slash commands and ephemeral messages;
* uploaded files like ``files.slack.com`` serves them: :meth:`add_file` gives the
  file object for a message's ``files[]``; its ``url_private`` answers the bytes
  only with ``Authorization: Bearer <bot token>``, otherwise a 302 to a login
  page; ``files_read = False`` plays a bot token without the ``files:read`` scope
  (the same 302, or with ``login_page_as = "html"`` the login page itself with a
  200); every download attempt is recorded in :attr:`file_gets`;
* a Socket Mode websocket: ``hello`` on connect, envelopes pushed with
  :meth:`push`, acks recorded, and :meth:`drop_sockets` / :meth:`freeze` to
  kill or half-open the connection;
* :meth:`deliver` posts an Events API / interactivity / slash command body,
  signed with the signing secret (and ``X-Slack-Retry-Num`` for retries), to
  the app's ``/slack/events`` route.

Every Web API call is recorded in :attr:`calls`.  Standalone::

    python -m tests.fakes.slack --port 8081     # prints the base URL
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import itertools
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
from aiohttp import WSMsgType, web

from tests.fakes.slack_blocks import SlackApiFault, _check_blocks, block_actions
from tests.fakes.slack_files import files_info
from tests.fakes.slack_history import listing

SIGNING_SECRET = "fake-signing-secret"
BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"
TEAM = "T0FAKE"
BOT_USER = "UBOT"
BOT_ID = "BBOT"


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    at: float
    status: int = 200
    ok: bool = True
    error: str = ""


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str = ""
    user: str = BOT_USER
    reactions: set[str] = field(default_factory=set)
    edits: int = 0
    deleted: bool = False
    metadata: dict[str, Any] | None = None  # message metadata (event_type, event_payload)


@dataclass
class FakeFile:
    id: str
    name: str
    mimetype: str
    data: bytes


@dataclass
class FileGet:
    path: str
    authorized: bool  # carried this fake's bot token
    status: int


# what deploy/slack-manifest.yaml grants the bot token
MANIFEST_SCOPES = [
    "app_mentions:read",
    "chat:write",
    "im:history",
    "im:read",
    "im:write",
    "channels:history",
    "groups:history",
    "reactions:write",
    "files:read",
    "users:read",
    "commands",
]


class FakeSlack:
    def __init__(
        self,
        *,
        bot_token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
        signing_secret: str = SIGNING_SECRET,
        team: str = TEAM,
        bot_user: str = BOT_USER,
        channel_interval: float | None = None,
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.stall: dict[str, float] = {}  # method -> seconds to wait before answering (once)
        # methods (or "response_url") whose connection drops after doing it (once)
        self.drop: set[str] = set()
        self.team = team
        self.bot_user = bot_user
        self.channel_interval = channel_interval  # 429 when a channel is posted to faster
        self.calls: list[Call] = []
        self.messages: dict[tuple[str, str], Message] = {}
        self.ephemerals: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []  # response_url posts
        self.not_member: set[str] = set()  # channels where chat.postMessage -> not_in_channel
        # block types answered with invalid_blocks (a Slack that counts them invalid)
        self.refused_blocks: set[str] = set()
        self.acks: dict[str, dict[str, Any]] = {}
        self.files: dict[str, FakeFile] = {}
        self.file_objects: dict[str, dict[str, Any]] = {}  # files.info answers
        self.file_gets: list[FileGet] = []
        self.files_read = True  # False: the bot token lacks the files:read scope
        self.login_page_as = "redirect"  # or "html": how files_read=False shows
        self.files_moved_to = ""  # a file URL redirects here even with files:read
        self.users: dict[str, dict[str, Any]] = {}  # users.info (empty: any id answers)
        self.scopes: set[str] = set(MANIFEST_SCOPES)  # the bot token's (x-oauth-scopes)
        self.sockets_opened = 0
        self._sockets: list[web.WebSocketResponse] = []
        self._transports: dict[web.WebSocketResponse, Any] = {}
        self._frozen: set[web.WebSocketResponse] = set()
        self._faults: list[
            tuple[str | None, int, float, str]
        ] = []  # method, status, retry_after, error
        self._last_post: dict[str, float] = {}
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._ack_event = asyncio.Event()
        self._conn_event = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._http: httpx.AsyncClient | None = None
        self.url = ""

    # -- lifecycle ------------------------------------------------------------
    @property
    def api_url(self) -> str:
        return self.url + "/api/"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        app.router.add_post("/response/{rid}", self._response_url)
        app.router.add_get("/socket", self._socket)
        app.router.add_get("/files-pri/{key}/{name}", self._file)
        app.router.add_get("/files-pri/{key}/download/{name}", self._file)
        # Enterprise Grid's second host (files-origin.slack.com), where files_moved_to
        # may point: the bytes for the bot token, never a further redirect
        app.router.add_get("/files-origin/{key}/{name}", self._file)
        app.router.add_get("/login", self._login_page)
        app.router.add_get("/_fake/calls", self._ctl_calls)
        app.router.add_post("/_fake/ratelimit", self._ctl_ratelimit)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        sock = server.sockets[0]  # type: ignore[union-attr]
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close()
        if self._http is not None:
            await self._http.aclose()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- scripting ------------------------------------------------------------
    def rate_limit(
        self, method: str | None = None, *, times: int = 1, retry_after: float = 0
    ) -> None:
        """The next ``times`` calls (to ``method``, or any) get HTTP 429 + Retry-After."""
        for _ in range(times):
            self._faults.append((method, 429, retry_after, "ratelimited"))

    def fail(self, method: str | None, error: str, *, times: int = 1) -> None:
        """The next ``times`` calls (to ``method``) answer ok=false with ``error``."""
        for _ in range(times):
            self._faults.append((method, 200, 0, error))

    def calls_to(self, method: str, *, ok: bool | None = True) -> list[Call]:
        return [c for c in self.calls if c.method == method and (ok is None or c.ok == ok)]

    def thread(self, channel: str, thread_ts: str = "") -> list[Message]:
        """Visible messages in a channel (top level) or in one thread, in order."""
        msgs = [m for m in self.messages.values() if m.channel == channel and not m.deleted]
        if thread_ts:
            msgs = [m for m in msgs if m.thread_ts == thread_ts]
        else:
            msgs = [m for m in msgs if not m.thread_ts]
        return sorted(msgs, key=lambda m: float(m.ts))

    def add_user_message(
        self, channel: str, text: str, *, user: str = "U1", thread_ts: str = ""
    ) -> Message:
        m = Message(channel, self._next_ts(), text, [], thread_ts=thread_ts, user=user)
        self.messages[(channel, m.ts)] = m
        return m

    def add_file(
        self, data: bytes, mimetype: str, name: str, *, user: str = "U1"
    ) -> dict[str, Any]:
        """Store an uploaded file; its object as Slack puts it in a message's ``files[]``."""
        f = FakeFile(f"F{next(self._ids):08d}", name, mimetype, data)
        self.files[f.id] = f
        base = f"{self.url}/files-pri/{self.team}-{f.id}"
        obj = self.file_objects[f.id] = {
            "id": f.id,
            "created": int(time.time()),
            "timestamp": int(time.time()),
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rsplit(".", 1)[-1] if "." in name else "binary",
            "pretty_type": mimetype.split("/")[-1].upper(),
            "user": user,
            "user_team": self.team,
            "mode": "hosted",
            "is_external": False,
            "is_public": False,
            "size": len(data),
            "url_private": f"{base}/{name}",
            "url_private_download": f"{base}/download/{name}",
            "permalink": f"{self.url}/files/{user}/{f.id}/{name}",
        }
        return obj

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _take_fault(self, method: str) -> tuple[int, float, str] | None:
        for i, (m, status, ra, err) in enumerate(self._faults):
            if m is None or m == method:
                del self._faults[i]
                return status, ra, err
        return None

    # -- Web API ----------------------------------------------------------------
    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            ctype = request.headers.get("Content-Type", "")
            if ctype.startswith("application/json"):
                args.update(orjson.loads(await request.read() or b"{}"))
            else:
                args.update(dict(await request.post()))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        token = token or str(args.pop("token", ""))
        call = Call(method, args, time.time())
        self.calls.append(call)
        fault = self._take_fault(method)
        if fault is not None:
            status, retry_after, error = fault
            call.ok, call.error, call.status = False, error, status
            headers = {"Retry-After": str(int(retry_after))} if status == 429 else {}
            return web.json_response({"ok": False, "error": error}, status=status, headers=headers)
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        try:
            if token != expected:
                raise SlackApiFault("invalid_auth" if token else "not_authed")
            handler = self._methods().get(method)
            if handler is None:
                raise SlackApiFault("unknown_method")
            result = handler(args, request)
        except SlackApiFault as fault_:
            call.ok, call.error = False, fault_.error
            return web.json_response({"ok": False, "error": fault_.error})
        except _RateLimited as rl:
            call.ok, call.error, call.status = False, "ratelimited", 429
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(rl.retry_after)},
            )
        stall = self.stall.pop(method, 0.0)
        if stall:  # done, but the answer comes too late (the client timed out)
            await asyncio.sleep(stall)
        if method in self.drop:  # done, but the connection drops before the answer
            self.drop.discard(method)
            if request.transport is not None:
                request.transport.close()
        return web.json_response(
            {"ok": True, **result}, headers={"x-oauth-scopes": ",".join(sorted(self.scopes))}
        )

    def _methods(self) -> dict[str, Any]:
        return {
            "auth.test": self._m_auth_test,
            "apps.connections.open": self._m_apps_connections_open,
            "users.info": self._m_users_info,
            "chat.postMessage": self._m_chat_postMessage,
            "chat.update": self._m_chat_update,
            "chat.delete": self._m_chat_delete,
            "chat.postEphemeral": self._m_chat_postEphemeral,
            "conversations.history": self._m_conversations_history,
            "conversations.replies": self._m_conversations_replies,
            "reactions.add": self._m_reactions_add,
            "reactions.remove": self._m_reactions_remove,
            "files.info": lambda args, _request: files_info(
                self.file_objects, args, files_read=self.files_read, fault=SlackApiFault
            ),
        }

    def _m_auth_test(self, args: dict[str, Any], request: web.Request) -> dict[str, Any]:
        return {
            "url": "https://fake.slack.com/",
            "team": "Fake Team",
            "user": "parley",
            "team_id": self.team,
            "user_id": self.bot_user,
            "bot_id": BOT_ID,
        }

    def _m_apps_connections_open(
        self, args: dict[str, Any], request: web.Request
    ) -> dict[str, Any]:
        ws_url = self.url.replace("http://", "ws://") + f"/socket?ticket={next(self._ids)}"
        return {"url": ws_url}

    def _m_users_info(self, args: dict[str, Any], request: web.Request) -> dict[str, Any]:
        """Slack's user object (``profile.display_name`` is often "" when never set);
        with :attr:`users` filled, an id not in it is ``user_not_found``."""
        uid = str(args.get("user", ""))
        if self.users:
            if uid not in self.users:
                raise SlackApiFault("user_not_found")
            return {"user": self.users[uid]}
        return {"user": {"id": uid, "name": uid.lower(), "real_name": f"User {uid}"}}

    def add_user(self, uid: str, real_name: str, display_name: str = "") -> None:
        handle = real_name.split()[0].lower()
        self.users[uid] = {
            "id": uid,
            "team_id": self.team,
            "name": handle,
            "real_name": real_name,
            "profile": {"display_name": display_name, "real_name": real_name},
        }

    def _text_and_blocks(self, args: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        text = str(args.get("text") or "")
        blocks = args.get("blocks") or []
        if isinstance(blocks, str):
            blocks = orjson.loads(blocks)
        if not text and not blocks:
            raise SlackApiFault("no_text")
        if len(text) > 40_000:
            raise SlackApiFault("msg_too_long")
        _check_blocks(blocks)
        if any(b.get("type") in self.refused_blocks for b in blocks):
            raise SlackApiFault("invalid_blocks")
        return text, blocks

    def _m_chat_postMessage(self, args: dict[str, Any], request: web.Request) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        if not channel:
            raise SlackApiFault("channel_not_found")
        if channel in self.not_member:
            raise SlackApiFault("not_in_channel")
        now = time.monotonic()
        if self.channel_interval is not None:
            last = self._last_post.get(channel)
            if last is not None and now - last < self.channel_interval:
                raise _RateLimited(1)
        self._last_post[channel] = now
        text, blocks = self._text_and_blocks(args)
        thread_ts = str(args.get("thread_ts") or "")
        if thread_ts and (channel, thread_ts) not in self.messages:
            raise SlackApiFault("thread_not_found")
        meta = args.get("metadata")
        if isinstance(meta, str):
            meta = orjson.loads(meta)
        if meta is not None and (
            not isinstance(meta, dict)
            or not isinstance(meta.get("event_type"), str)
            or not isinstance(meta.get("event_payload"), dict)
        ):
            raise SlackApiFault("invalid_metadata_format")
        m = Message(channel, self._next_ts(), text, blocks, thread_ts=thread_ts, metadata=meta)
        self.messages[(channel, m.ts)] = m
        return {"channel": channel, "ts": m.ts, "message": {"text": text, "ts": m.ts}}

    def _m_conversations_history(
        self, args: dict[str, Any], request: web.Request
    ) -> dict[str, Any]:
        """A channel's top-level messages, newest first."""
        channel = str(args.get("channel") or "")
        if channel in self.not_member:
            raise SlackApiFault("not_in_channel")
        msgs = [m for (c, _), m in self.messages.items() if c == channel and not m.thread_ts]
        return listing(args, sorted(msgs, key=lambda m: float(m.ts), reverse=True))

    def _m_conversations_replies(
        self, args: dict[str, Any], request: web.Request
    ) -> dict[str, Any]:
        """A thread: its parent, then its replies, oldest first."""
        channel, ts = str(args.get("channel") or ""), str(args.get("ts") or "")
        if channel in self.not_member:
            raise SlackApiFault("not_in_channel")
        if (channel, ts) not in self.messages:
            raise SlackApiFault("thread_not_found")
        msgs = [
            m
            for (c, mts), m in self.messages.items()
            if c == channel and (mts == ts or m.thread_ts == ts)
        ]
        return listing(args, sorted(msgs, key=lambda m: float(m.ts)))

    def _find(self, args: dict[str, Any]) -> Message:
        m = self.messages.get((str(args.get("channel") or ""), str(args.get("ts") or "")))
        if m is None or m.deleted:
            raise SlackApiFault("message_not_found")
        if m.user != self.bot_user:
            raise SlackApiFault("cant_update_message")
        return m

    def _m_chat_update(self, args: dict[str, Any], request: web.Request) -> dict[str, Any]:
        m = self._find(args)
        if "blocks" not in args:  # Slack keeps the previous blocks ([] removes them)
            args = {**args, "blocks": m.blocks}
        text, blocks = self._text_and_blocks(args)
        m.text, m.blocks, m.edits = text, blocks, m.edits + 1
        return {"channel": m.channel, "ts": m.ts, "text": text}

    def _m_chat_delete(self, args: dict[str, Any], request: web.Request) -> dict[str, Any]:
        m = self._find(args)
        m.deleted = True
        return {"channel": m.channel, "ts": m.ts}

    def _m_chat_postEphemeral(self, args: dict[str, Any], request: web.Request) -> dict[str, Any]:
        if not args.get("user"):
            raise SlackApiFault("user_not_found")
        if str(args.get("channel") or "") in self.not_member:
            raise SlackApiFault("not_in_channel")
        text, blocks = self._text_and_blocks(args)
        self.ephemerals.append(
            {
                "channel": args["channel"],
                "user": args["user"],
                "text": text,
                "blocks": blocks,
                "thread_ts": str(args.get("thread_ts") or ""),
            }
        )
        return {"message_ts": self._next_ts()}

    def _reaction_target(self, args: dict[str, Any]) -> Message:
        m = self.messages.get((str(args.get("channel") or ""), str(args.get("timestamp") or "")))
        if m is None:
            raise SlackApiFault("message_not_found")
        return m

    def _m_reactions_add(self, args: dict[str, Any], request: web.Request) -> dict[str, Any]:
        m = self._reaction_target(args)
        name = str(args.get("name") or "")
        if name in m.reactions:
            raise SlackApiFault("already_reacted")
        m.reactions.add(name)
        return {}

    def _m_reactions_remove(self, args: dict[str, Any], request: web.Request) -> dict[str, Any]:
        m = self._reaction_target(args)
        name = str(args.get("name") or "")
        if name not in m.reactions:
            raise SlackApiFault("no_reaction")
        m.reactions.discard(name)
        return {}

    async def _response_url(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read() or b"{}")
        body["_rid"] = request.match_info["rid"]
        if sum(r["_rid"] == body["_rid"] for r in self.responses) >= 5:
            return web.Response(status=404, text="used_url")  # 5 uses per response_url
        self.responses.append(body)
        if "response_url" in self.drop:  # shown, but the connection drops before the answer
            self.drop.discard("response_url")
            if request.transport is not None:
                request.transport.close()
        return web.Response(text="ok")

    async def _file(self, request: web.Request) -> web.Response:
        """files.slack.com: the bytes for the bot token with files:read, else the login page."""
        team, _, fid = request.match_info["key"].partition("-")
        f = self.files.get(fid)
        authorized = request.headers.get("Authorization", "") == f"Bearer {self.bot_token}"
        get = FileGet(request.path, authorized, 200)
        self.file_gets.append(get)
        if f is None or team != self.team or f.name != request.match_info["name"]:
            get.status = 404
            return web.Response(status=404, text="Not Found")
        origin_host = request.path.startswith("/files-origin/")
        if authorized and self.files_read and self.files_moved_to and not origin_host:
            get.status = 302  # e.g. Enterprise Grid's files-origin host
            return web.Response(status=302, headers={"Location": self.files_moved_to})
        if authorized and self.files_read:
            return web.Response(body=f.data, content_type=f.mimetype)
        if authorized and self.login_page_as == "html":
            return await self._login_page(request)
        get.status = 302
        login = f"{self.url}/login?" + urlencode({"redir": request.path_qs})
        return web.Response(status=302, headers={"Location": login})

    async def _login_page(self, request: web.Request) -> web.Response:
        return web.Response(
            text="<!DOCTYPE html><html><body>Sign in to Fake Team</body></html>",
            content_type="text/html",
        )

    def response_url(self) -> str:
        return f"{self.url}/response/{next(self._ids)}"

    # -- control endpoints (standalone / benchmarks) -------------------------------
    async def _ctl_calls(self, request: web.Request) -> web.Response:
        return web.json_response(
            [
                {"method": c.method, "ok": c.ok, "error": c.error, "at": c.at, "args": c.args}
                for c in self.calls
            ]
        )

    async def _ctl_ratelimit(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read() or b"{}")
        self.rate_limit(
            body.get("method"),
            times=int(body.get("times", 1)),
            retry_after=float(body.get("retry_after", 0)),
        )
        return web.json_response({"ok": True})

    # -- Socket Mode ------------------------------------------------------------
    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        self.sockets_opened += 1
        self._sockets.append(ws)
        self._transports[ws] = request.transport
        self._conn_event.set()
        await ws.send_str(
            orjson.dumps({"type": "hello", "num_connections": len(self._sockets)}).decode()
        )
        try:
            async for msg in ws:
                if msg.type == WSMsgType.PING:
                    if ws not in self._frozen:
                        await ws.pong(msg.data)
                elif msg.type == WSMsgType.TEXT and ws not in self._frozen:
                    data = orjson.loads(msg.data)
                    if "envelope_id" in data:
                        self.acks[str(data["envelope_id"])] = data
                        self._ack_event.set()
        finally:
            if ws in self._sockets:
                self._sockets.remove(ws)
            self._frozen.discard(ws)
        return ws

    @property
    def open_sockets(self) -> int:
        return len(self._sockets)

    async def wait_connected(self, count: int = 1, within: float = 5.0) -> None:
        """Wait until ``count`` sockets were opened in total and one is open now."""
        deadline = time.monotonic() + within
        while self.sockets_opened < count or not self._sockets:
            self._conn_event.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.sockets_opened} socket(s) opened, wanted {count}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._conn_event.wait(), left)

    async def push(self, kind: str, payload: dict[str, Any], *, retry_attempt: int = 0) -> str:
        """Send an envelope (events_api | interactive | slash_commands) on the newest socket."""
        if not self._sockets:
            raise RuntimeError("no Socket Mode connection")
        envelope_id = f"env-{next(self._ids)}"
        await self._sockets[-1].send_str(
            orjson.dumps(
                {
                    "envelope_id": envelope_id,
                    "type": kind,
                    "payload": payload,
                    "accepts_response_payload": kind != "events_api",
                    "retry_attempt": retry_attempt,
                    "retry_reason": "timeout" if retry_attempt else "",
                }
            ).decode()
        )
        return envelope_id

    async def wait_ack(self, envelope_id: str, within: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while envelope_id not in self.acks:
            self._ack_event.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"envelope {envelope_id} not acknowledged")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ack_event.wait(), left)
        return self.acks[envelope_id]

    async def drop_sockets(self) -> None:
        """Kill every open socket abruptly (no close frame), like a network cut."""
        for ws in list(self._sockets):
            transport = self._transports.pop(ws, None)
            if transport is not None:
                transport.abort()
            self._sockets.remove(ws)

    def freeze(self) -> None:
        """Half-open the open sockets: they stay up but nothing (pongs, acks) comes back.

        Sockets opened later behave normally."""
        self._frozen.update(self._sockets)

    async def request_disconnect(self, reason: str = "refresh_requested") -> None:
        for ws in list(self._sockets):
            await ws.send_str(orjson.dumps({"type": "disconnect", "reason": reason}).decode())

    # -- payload builders --------------------------------------------------------
    def event_body(self, event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
        return {
            "token": "verification-token-unused",
            "team_id": self.team,
            "api_app_id": "A0FAKE",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._ids):08d}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "team_id": self.team,
                    "user_id": self.bot_user,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
        }

    def message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U1",
        thread_ts: str = "",
        channel_type: str | None = None,
        kind: str = "message",
        **extra: Any,
    ) -> dict[str, Any]:
        """A user's message stored in the fake, as an event_callback body."""
        m = self.add_user_message(channel, text, user=user, thread_ts=thread_ts)
        ev: dict[str, Any] = {
            "type": kind,
            "user": user,
            "text": text,
            "ts": m.ts,
            "channel": channel,
            "event_ts": m.ts,
            "team": self.team,
        }
        if kind == "message":
            ev["channel_type"] = channel_type or ("im" if channel.startswith("D") else "channel")
        if thread_ts:
            ev["thread_ts"] = thread_ts
        ev.update(extra)
        return self.event_body(ev)

    def press(self, channel: str, ts: str, label: str, *, user: str = "U1") -> dict[str, Any]:
        """The block_actions payload for pressing the button ``label`` on a stored message."""
        m = self.messages[(channel, ts)]
        return block_actions(
            m,
            channel,
            label,
            user=user,
            team=self.team,
            trigger_id=f"trig-{next(self._ids)}",
            response_url=self.response_url(),
        )

    def command(
        self, channel: str, text: str, *, user: str = "U1", command: str = "/parley"
    ) -> dict[str, str]:
        return {
            "token": "unused",
            "team_id": self.team,
            "team_domain": "fake",
            "channel_id": channel,
            "channel_name": "directmessage" if channel.startswith("D") else "general",
            "user_id": user,
            "user_name": user.lower(),
            "command": command,
            "text": text,
            "api_app_id": "A0FAKE",
            "response_url": self.response_url(),
            "trigger_id": f"trig-{next(self._ids)}",
        }

    # -- signed delivery to the app --------------------------------------------------
    def sign(
        self, body: bytes, timestamp: int | None = None, secret: str | None = None
    ) -> dict[str, str]:
        ts = str(int(time.time()) if timestamp is None else timestamp)
        base = b"v0:" + ts.encode() + b":" + body
        sig = (
            "v0="
            + hmac.new((secret or self.signing_secret).encode(), base, hashlib.sha256).hexdigest()
        )
        return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig}

    async def deliver(
        self,
        target: httpx.AsyncClient | str,
        body: dict[str, Any],
        *,
        form: bool = False,
        retry_num: int | None = None,
        timestamp: int | None = None,
        secret: str | None = None,
        path: str = "/slack/events",
    ) -> httpx.Response:
        """POST a signed body to the app. ``form``: interactivity / slash command encoding."""
        if form:
            if "type" in body and body.get("type") == "block_actions":
                raw = urlencode({"payload": orjson.dumps(body).decode()}).encode()
            else:
                raw = urlencode(body).encode()
            ctype = "application/x-www-form-urlencoded"
        else:
            raw, ctype = orjson.dumps(body), "application/json"
        headers = {"Content-Type": ctype, **self.sign(raw, timestamp, secret)}
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        if isinstance(target, str):
            if self._http is None:
                self._http = httpx.AsyncClient()
            return await self._http.post(target.rstrip("/") + path, content=raw, headers=headers)
        return await target.post(path, content=raw, headers=headers)


class _RateLimited(Exception):
    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after


async def _main(port: int) -> None:
    fake = FakeSlack()
    url = await fake.start(port=port)
    print(url, flush=True)
    print(
        f"api: {fake.api_url}  bot token: {fake.bot_token}  app token: {fake.app_token}", flush=True
    )
    try:
        await asyncio.Event().wait()
    finally:
        await fake.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Fake Slack Web API + Socket Mode server")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.port))
