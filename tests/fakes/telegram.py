"""A fake Telegram Bot API server that the real python-telegram-bot talks to.

Point ``Bot(base_url=fake.base_url, base_file_url=fake.file_url)`` at it.  It
enforces what the real API enforces and Parley depends on:

* 4096 UTF-16 units per message, no empty text;
* entity validation (out of range, zero length, unknown type, bad URL) and a
  MarkdownV2 check (unescaped reserved characters, unbalanced markers) -> 400
  ``Bad Request: can't parse entities: ...``;
* ``callback_data`` at most 64 bytes -> 400 ``BUTTON_DATA_INVALID``;
* per-chat and global rates (configurable) -> 429 with ``retry_after``;
* ``getUpdates`` while a webhook is set -> 409 Conflict; offset semantics
  (updates below the offset are confirmed and gone);
* editing without ``reply_markup`` removes the inline keyboard; editing to the
  same content -> 400 ``message is not modified``;
* ``answerCallbackQuery`` only once per query;
* a reply to a message that is gone (``forget``: the user deleted it) is sent
  without the reply when ``allow_sending_without_reply`` is set, except in a
  forum topic, where Telegram ignores that flag: 400 ``Bad Request: message to
  be replied not found``;
* a basic group upgraded to a supergroup (``migrate``): every call naming the
  old chat id is answered 400 ``Bad Request: group chat was upgraded to a
  supergroup chat`` with ``parameters.migrate_to_chat_id``; the old group's
  messages stay in the old chat under their ids (the supergroup numbers its
  own), and the two service messages are emitted: ``migrate_to_chat_id`` in the
  old group, ``migrate_from_chat_id`` in the supergroup.

Scriptable: ``fail_next`` (inject any error), ``deliver`` (POST an update to
the webhook with the secret header; call again to redeliver), ``queue_update``
(for getUpdates), ``press`` (a callback_query on a sent message), ``add_file``,
``migrate`` (upgrade a group to a supergroup).  Every call is recorded in ``calls``.

Standalone: ``python -m tests.fakes.telegram --port 8081`` prints the base URL.
Control endpoints for other processes: ``POST /_fake/update`` (an Update JSON:
queued, or delivered to the webhook when one is set), ``POST /_fake/migrate``
(``{"chat_id": N}``: upgrade it, emit the service updates, answer the new id),
``GET /_fake/calls``, ``POST /_fake/reset``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from aiohttp import web

from tests.fakes.telegram_checks import (
    MAX_ENTITIES,
    ApiError,
    _check_entities,
    _check_markup,
    _check_mdv2,
    entities_telegram_keeps,
    utf16_len,
)

TOKEN = "123456:TEST-fake-token_abcdefghijklmnop"
BOT_ID = 123456
BOT_USERNAME = "parley_test_bot"
WEBHOOK_SECRET = "s3cret_-TOKEN"  # what tests configure as TELEGRAM_WEBHOOK_SECRET

RATE_COUNTED = frozenset(
    {"sendMessage", "editMessageText", "sendPhoto", "sendDocument", "editMessageReplyMarkup"}
)


MIGRATED = "Bad Request: group chat was upgraded to a supergroup chat"


@dataclass(frozen=True)
class Migration:
    """A group upgraded by :meth:`FakeTelegram.migrate`: its new id and the two
    service updates (old group's ``migrate_to_chat_id``, supergroup's
    ``migrate_from_chat_id``), e.g. to deliver them again."""

    old: int
    new: int
    updates: tuple[dict[str, Any], dict[str, Any]]


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float
    token: str = TOKEN
    status: int = 200


@dataclass
class StoredMessage:
    message_id: int
    chat_id: int
    text: str
    entities: list[dict[str, Any]]
    reply_markup: dict[str, Any] | None
    message_thread_id: int | None
    date: int = field(default_factory=lambda: int(time.time()))


class FakeTelegram:
    """The fake server. ``await fake.start()`` / ``await fake.stop()``."""

    def __init__(
        self,
        *,
        token: str = TOKEN,
        bot_id: int = BOT_ID,
        username: str = BOT_USERNAME,
        chat_interval: float | None = None,
        global_per_second: int | None = None,
        retry_after: int | float | None = None,
    ) -> None:
        self.token = token
        self.bot_id = bot_id
        self.username = username
        self.revoked = False
        # Rates: at most one counted call per ``chat_interval`` seconds per chat,
        # at most ``global_per_second`` per rolling second overall.
        self.chat_interval = chat_interval
        self.global_per_second = global_per_second
        self.retry_after = retry_after  # fixed retry_after for 429s (else computed)
        self.calls: list[Call] = []
        self.messages: dict[tuple[int, int], StoredMessage] = {}
        self.chats: dict[int, dict[str, Any]] = {}
        self.webhook: dict[str, Any] = {"url": "", "secret_token": ""}
        self.webhook_transport: httpx.AsyncBaseTransport | None = None
        # extra getWebhookInfo fields, as Telegram reports failing deliveries:
        # last_error_date (Unix time), last_error_message, pending_update_count
        self.webhook_report: dict[str, Any] = {}
        self.pending: deque[dict[str, Any]] = deque()
        self.files: dict[str, tuple[bytes, str]] = {}
        self.answered: dict[str, str | None] = {}
        self.callback_queries: dict[str, dict[str, Any]] = {}
        self._failures: list[tuple[str, ApiError, int]] = []
        self._last_chat_send: dict[int, float] = {}
        self._global_window: deque[float] = deque()
        self._ids = itertools.count(1)
        self._update_ids = itertools.count(1000)
        self._cq_ids = itertools.count(7000)
        self.migrated: dict[int, int] = {}  # basic group id -> its supergroup's id
        self.gone: set[tuple[int, int]] = set()  # (chat, message) deleted by their senders
        # the bot's command lists: (scope type, language code) -> [{command, description}]
        self.commands: dict[tuple[str, str], list[dict[str, str]]] = {}
        self._supergroup_ids = itertools.count(1_234_567_890)
        self._new_update = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._closing = False
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/bot"

    @property
    def file_url(self) -> str:
        return f"{self.url}/file/bot"

    async def start(self, port: int = 0) -> FakeTelegram:
        app = web.Application(client_max_size=50 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle_api)
        app.router.add_get("/file/bot{token}/{path:.*}", self._handle_file)
        app.router.add_post("/_fake/update", self._ctl_update)
        app.router.add_post("/_fake/migrate", self._ctl_migrate)
        app.router.add_get("/_fake/calls", self._ctl_calls)
        app.router.add_post("/_fake/reset", self._ctl_reset)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def stop(self) -> None:
        self._closing = True
        self._new_update.set()  # release long polls
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def reset(self) -> None:
        self.calls.clear()
        self.messages.clear()
        self.pending.clear()
        self.migrated.clear()
        self.gone.clear()
        self._failures.clear()
        self._last_chat_send.clear()
        self._global_window.clear()
        self.webhook = {"url": "", "secret_token": ""}
        self.webhook_report = {}

    # -- scripting -----------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        code: int = 400,
        description: str = "Bad Request: can't parse entities: test",
        *,
        retry_after: int | float | None = None,
        count: int = 1,
        gateway: bool = False,
        after: bool = False,
    ) -> None:
        """The next ``count`` calls of ``method`` ("*" = any) fail like this.

        ``gateway``: answered as Telegram's front proxy does for 502 / 504 (an nginx
        HTML page, no JSON); ``after``: the call is carried out first (a 504 whose
        request Telegram did handle: the message exists)."""
        params = {"retry_after": retry_after} if retry_after is not None else None
        if code == 429 and not description.startswith("Too Many"):
            description = f"Too Many Requests: retry after {retry_after}"
        err = ApiError(code, description, params, gateway=gateway, after=after)
        self._failures.append((method, err, count))

    def set_chat(
        self, chat_id: int, type: str = "", *, is_forum: bool = False, title: str = ""
    ) -> dict[str, Any]:
        if not type:
            type = "private" if chat_id > 0 else "supergroup"
        chat: dict[str, Any] = {"id": chat_id, "type": type}
        if type == "private":
            chat["first_name"] = f"User{chat_id}"
        else:
            chat["title"] = title or f"Group {chat_id}"
        if is_forum:
            chat["is_forum"] = True
        self.chats[chat_id] = chat
        return chat

    def chat(self, chat_id: int) -> dict[str, Any]:
        return self.chats.get(chat_id) or self.set_chat(chat_id)

    async def migrate(self, chat_id: int, *, user_id: int = 42, emit: bool = True) -> Migration:
        """Upgrade the basic group ``chat_id`` to a supergroup (new id ``-100…``).

        From now on every call naming ``chat_id`` gets Telegram's 400 with
        ``migrate_to_chat_id``.  ``emit``: the two service updates are delivered
        to the webhook when one is set (old group's first), else queued for
        getUpdates; either way they are returned for redelivery.
        """
        old = self.chat(chat_id)
        if old["type"] != "group":
            raise ValueError(f"chat {chat_id} is a {old['type']}, not a basic group")
        new_id = -(10**12 + next(self._supergroup_ids))
        self.migrated[chat_id] = new_id
        new = self.set_chat(new_id, "supergroup", title=old.get("title", ""))
        now = int(time.time())
        to_update = {
            "update_id": next(self._update_ids),
            "message": {
                "message_id": next(self._ids),
                "date": now,
                "chat": old,
                "from": self.user(user_id),
                "migrate_to_chat_id": new_id,
            },
        }
        from_update = {
            "update_id": next(self._update_ids),
            "message": {
                "message_id": next(self._ids),
                "date": now,
                "chat": new,
                "from": self.user(user_id),
                "migrate_from_chat_id": chat_id,
            },
        }
        migration = Migration(chat_id, new_id, (to_update, from_update))
        if emit:
            for update in migration.updates:
                if self.webhook["url"]:
                    await self.deliver(update)
                else:
                    self.queue_update(update)
        return migration

    def forget(self, chat_id: int, message_id: int) -> None:
        """The user deleted their message ``message_id`` (e.g. the question)."""
        self.gone.add((chat_id, message_id))
        self.messages.pop((chat_id, message_id), None)

    def add_file(
        self, file_id: str, content: bytes, mime: str = "application/octet-stream"
    ) -> None:
        self.files[file_id] = (content, mime)

    def user(self, user_id: int, name: str = "") -> dict[str, Any]:
        return {"id": user_id, "is_bot": False, "first_name": name or f"User{user_id}"}

    def bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Parley",
            "username": self.username,
        }

    def message_update(
        self,
        chat_id: int,
        text: str = "",
        *,
        user_id: int | None = None,
        thread_id: int | None = None,
        entities: list[dict[str, Any]] | None = None,
        reply_to: dict[str, Any] | None = None,
        edited: bool = False,
        extra: dict[str, Any] | None = None,
        update_id: int | None = None,
    ) -> dict[str, Any]:
        """An Update with a user message (fills in ids, dates and the chat)."""
        chat = self.chat(chat_id)
        uid = user_id if user_id is not None else (chat_id if chat_id > 0 else 42)
        msg: dict[str, Any] = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": chat,
            "from": self.user(uid),
        }
        if text:
            msg["text"] = text
        if entities:
            msg["entities"] = entities
        if thread_id is not None:
            msg["message_thread_id"] = thread_id
            msg["is_topic_message"] = True
        if reply_to is not None:
            msg["reply_to_message"] = reply_to
        if extra:
            msg.update(extra)
        if edited:
            msg["edit_date"] = int(time.time())
        key = "edited_message" if edited else "message"
        return {"update_id": update_id or next(self._update_ids), key: msg}

    def press(
        self, chat_id: int, message_id: int, data: str, *, user_id: int = 42
    ) -> dict[str, Any]:
        """An Update with a callback_query: ``user_id`` pressed a button on a sent message."""
        stored = self.messages.get((chat_id, message_id))
        msg: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": self.chat(chat_id),
            "from": self.bot_user(),
            "text": stored.text if stored else "prompt",
        }
        if stored and stored.message_thread_id:
            msg["message_thread_id"] = stored.message_thread_id
            msg["is_topic_message"] = True
        if stored and stored.reply_markup:
            msg["reply_markup"] = stored.reply_markup
        cq_id = str(next(self._cq_ids))
        cq = {
            "id": cq_id,
            "from": self.user(user_id),
            "chat_instance": f"ci{chat_id}",
            "message": msg,
            "data": data,
        }
        self.callback_queries[cq_id] = {"at": time.time()}
        return {"update_id": next(self._update_ids), "callback_query": cq}

    def queue_update(self, update: dict[str, Any]) -> None:
        """Make an update available to getUpdates."""
        self.pending.append(update)
        self._new_update.set()

    async def deliver(self, update: dict[str, Any], *, secret: str | None = None) -> int:
        """POST ``update`` to the webhook (with its secret header); the HTTP status.

        Call it again with the same update to simulate Telegram's redelivery.
        """
        url = self.webhook["url"]
        if not url:
            raise RuntimeError("no webhook set")
        token = self.webhook["secret_token"] if secret is None else secret
        headers = {"Content-Type": "application/json"}
        if token:
            headers["X-Telegram-Bot-Api-Secret-Token"] = token
        async with httpx.AsyncClient(transport=self.webhook_transport, timeout=10) as client:
            resp = await client.post(url, content=orjson.dumps(update), headers=headers)
        return resp.status_code

    # -- queries for tests ---------------------------------------------------------

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method and c.status == 200]

    def sent_texts(self, chat_id: int | None = None) -> list[str]:
        return [
            c.params["text"]
            for c in self.calls_of("sendMessage")
            if chat_id is None or int(c.params["chat_id"]) == chat_id
        ]

    def message(self, chat_id: int, message_id: int) -> StoredMessage:
        return self.messages[(chat_id, message_id)]

    # -- HTTP ------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            body = await request.read()
            if body:
                params.update(orjson.loads(body))
        elif request.can_read_body:
            form = await request.post()
            for k, v in form.items():
                params[k] = v if isinstance(v, str) else "<file>"
        return params

    async def _handle_api(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        method = request.match_info["method"]
        params = await self._params(request)
        call = Call(method, params, time.monotonic(), token)
        self.calls.append(call)
        try:
            if token != self.token or self.revoked:
                raise ApiError(401, "Unauthorized")
            try:
                self._scripted_failure(method)
            except ApiError as exc:
                if not exc.after:
                    raise
                await self._dispatch(method, params)
                raise
            result = await self._dispatch(method, params)
        except ApiError as exc:
            call.status = exc.code
            if exc.gateway:
                page = f"<html><head><title>{exc.code} {exc.description}</title></head>"
                page += f"<body><center><h1>{exc.code} {exc.description}</h1></center>"
                page += "<hr><center>nginx</center></body></html>"
                return web.Response(text=page, status=exc.code, content_type="text/html")
            body: dict[str, Any] = {
                "ok": False,
                "error_code": exc.code,
                "description": exc.description,
            }
            if exc.parameters:
                body["parameters"] = exc.parameters
            return web.Response(
                body=orjson.dumps(body), status=exc.code, content_type="application/json"
            )
        return web.Response(
            body=orjson.dumps({"ok": True, "result": result}), content_type="application/json"
        )

    def _scripted_failure(self, method: str) -> None:
        for i, (m, err, count) in enumerate(self._failures):
            if m in (method, "*"):
                if count <= 1:
                    del self._failures[i]
                else:
                    self._failures[i] = (m, err, count - 1)
                raise err

    def _rate(self, chat_id: int) -> None:
        now = time.monotonic()
        if self.chat_interval is not None:
            last = self._last_chat_send.get(chat_id)
            if last is not None and now - last < self.chat_interval:
                wait = self.chat_interval - (now - last)
                ra = self.retry_after if self.retry_after is not None else max(1, math.ceil(wait))
                raise ApiError(429, f"Too Many Requests: retry after {ra}", {"retry_after": ra})
        if self.global_per_second is not None:
            while self._global_window and now - self._global_window[0] >= 1.0:
                self._global_window.popleft()
            if len(self._global_window) >= self.global_per_second:
                ra = self.retry_after if self.retry_after is not None else 1
                raise ApiError(429, f"Too Many Requests: retry after {ra}", {"retry_after": ra})
            self._global_window.append(now)
        self._last_chat_send[chat_id] = now

    @staticmethod
    def _json(params: dict[str, Any], name: str) -> Any:
        v = params.get(name)
        if isinstance(v, str):
            try:
                return orjson.loads(v)
            except orjson.JSONDecodeError:
                raise ApiError(400, f"Bad Request: can't parse {name} JSON object") from None
        return v

    @staticmethod
    def _check_commands(raw: Any) -> list[dict[str, str]]:
        """setMyCommands' rules: at most 100; names of 1-32 lower-case letters, digits
        and underscores; descriptions of 1-256 characters."""
        if not isinstance(raw, list):
            raise ApiError(400, "Bad Request: can't parse commands JSON object")
        if len(raw) > 100:
            raise ApiError(400, "Bad Request: too many commands specified")
        out = []
        for c in raw:
            name = str(c.get("command", "")) if isinstance(c, dict) else ""
            desc = str(c.get("description", "")) if isinstance(c, dict) else ""
            if not re.fullmatch(r"[a-z0-9_]{1,32}", name):
                raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not desc.strip():
                raise ApiError(400, "Bad Request: command description must be non-empty")
            if len(desc) > 256:
                raise ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
            out.append({"command": name, "description": desc})
        return out

    @staticmethod
    def _int(params: dict[str, Any], name: str, required: bool = True) -> int | None:
        v = params.get(name)
        if v is None or v == "":
            if required:
                raise ApiError(400, f"Bad Request: {name} is empty")
            return None
        try:
            return int(v)
        except (TypeError, ValueError):
            raise ApiError(400, f"Bad Request: invalid {name}") from None

    def _validate_text(self, params: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        text = str(params.get("text") or "")
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        entities = self._json(params, "entities") or []
        parse_mode = params.get("parse_mode")
        if parse_mode == "MarkdownV2":
            _check_mdv2(text)
            entities = []  # we do not produce them; the text is what we check
        elif parse_mode not in (None, "", "HTML", "Markdown"):
            raise ApiError(400, f"Bad Request: unsupported parse_mode {parse_mode}")
        if utf16_len(text) > 4096:
            raise ApiError(400, "Bad Request: message is too long")
        _check_entities(text, entities)
        return text, entities_telegram_keeps(entities)[:MAX_ENTITIES]

    def _message_json(self, m: StoredMessage) -> dict[str, Any]:
        out: dict[str, Any] = {
            "message_id": m.message_id,
            "date": m.date,
            "chat": self.chat(m.chat_id),
            "from": self.bot_user(),
            "text": m.text,
        }
        if m.entities:
            out["entities"] = m.entities
        if m.reply_markup:
            out["reply_markup"] = m.reply_markup
        if m.message_thread_id:
            out["message_thread_id"] = m.message_thread_id
            out["is_topic_message"] = True
        return out

    def _check_migrated(self, p: dict[str, Any]) -> None:
        raw = p.get("chat_id")
        if raw is None or raw == "":
            return
        try:
            new_id = self.migrated.get(int(raw))
        except (TypeError, ValueError):
            return
        if new_id is not None:
            raise ApiError(400, MIGRATED, {"migrate_to_chat_id": new_id})

    async def _dispatch(self, method: str, p: dict[str, Any]) -> Any:
        self._check_migrated(p)
        if method == "getMe":
            return self.bot_user() | {
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
        if method == "sendMessage":
            chat_id = self._int(p, "chat_id")
            assert chat_id is not None
            text, entities = self._validate_text(p)
            markup = self._json(p, "reply_markup")
            _check_markup(markup)
            topic = self._int(p, "message_thread_id", required=False)
            reply = self._json(p, "reply_parameters") or {}
            if (chat_id, reply.get("message_id")) in self.gone and (
                topic or not reply.get("allow_sending_without_reply")
            ):
                raise ApiError(400, "Bad Request: message to be replied not found")
            self._rate(chat_id)
            m = StoredMessage(
                next(self._ids), chat_id, text, entities, markup or None, topic
            )  # fmt: skip
            self.messages[(chat_id, m.message_id)] = m
            return self._message_json(m)
        if method == "editMessageText":
            chat_id = self._int(p, "chat_id")
            mid = self._int(p, "message_id")
            assert chat_id is not None and mid is not None
            stored = self.messages.get((chat_id, mid))
            if stored is None:
                raise ApiError(400, "Bad Request: message to edit not found")
            text, entities = self._validate_text(p)
            markup = self._json(p, "reply_markup") or None
            _check_markup(markup)
            if (text, entities, markup) == (stored.text, stored.entities, stored.reply_markup):
                raise ApiError(
                    400,
                    "Bad Request: message is not modified: specified new message content and "
                    "reply markup are exactly the same as a current content and reply markup "
                    "of the message",
                )
            self._rate(chat_id)
            stored.text, stored.entities, stored.reply_markup = text, entities, markup
            return self._message_json(stored)
        if method == "deleteMessage":
            chat_id = self._int(p, "chat_id")
            mid = self._int(p, "message_id")
            assert chat_id is not None and mid is not None
            if self.messages.pop((chat_id, mid), None) is None:
                raise ApiError(400, "Bad Request: message to delete not found")
            return True
        if method == "sendChatAction":
            self._int(p, "chat_id")
            if p.get("action") not in ("typing", "upload_document", "upload_photo", "record_voice"):
                raise ApiError(400, "Bad Request: wrong parameter action in request")
            return True
        if method == "answerCallbackQuery":
            cq = str(p.get("callback_query_id") or "")
            if cq not in self.callback_queries or cq in self.answered:
                raise ApiError(
                    400,
                    "Bad Request: query is too old and response timeout expired or query ID "
                    "is invalid",
                )
            answer: str | None = p.get("text")
            if answer is not None and len(answer) > 200:
                raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
            self.answered[cq] = answer
            return True
        if method == "getUpdates":
            return await self._get_updates(p)
        if method == "setWebhook":
            url = str(p.get("url") or "")
            secret = str(p.get("secret_token") or "")
            if secret and not (
                len(secret) <= 256
                and all(c.isascii() and (c.isalnum() or c in "_-") for c in secret)
            ):
                raise ApiError(400, "Bad Request: secret token contains unallowed characters")
            if p.get("drop_pending_updates") in (True, "true", "True"):
                self.pending.clear()
            self.webhook = {
                "url": url,
                "secret_token": secret,
                "allowed_updates": self._json(p, "allowed_updates") or [],
            }
            self._new_update.set()  # wake a long poll so it sees the conflict
            return True
        if method in ("setMyCommands", "getMyCommands"):
            scope = self._json(p, "scope") or {"type": "default"}
            key = (str(scope.get("type", "default")), str(p.get("language_code") or ""))
            if method == "getMyCommands":
                return self.commands.get(key, [])
            self.commands[key] = self._check_commands(self._json(p, "commands"))
            return True
        if method == "deleteWebhook":
            if p.get("drop_pending_updates") in (True, "true", "True"):
                self.pending.clear()
            self.webhook = {"url": "", "secret_token": ""}
            return True
        if method == "getWebhookInfo":
            info: dict[str, Any] = {
                "url": self.webhook["url"],
                "has_custom_certificate": False,
                "pending_update_count": len(self.pending),
            }
            if self.webhook.get("allowed_updates"):
                info["allowed_updates"] = self.webhook["allowed_updates"]
            info.update(self.webhook_report)
            return info
        if method == "getFile":
            fid = str(p.get("file_id") or "")
            if fid not in self.files:
                raise ApiError(400, "Bad Request: invalid file_id")
            return {
                "file_id": fid,
                "file_unique_id": "u" + fid,
                "file_size": len(self.files[fid][0]),
                "file_path": f"documents/{fid}",
            }
        if method in ("close", "logOut"):
            return True
        raise ApiError(404, "Not Found")

    async def _get_updates(self, p: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook["url"]:
            raise ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use "
                "deleteWebhook to delete the webhook first",
            )
        offset = self._int(p, "offset", required=False)
        limit = self._int(p, "limit", required=False) or 100
        timeout = float(p.get("timeout") or 0)
        if offset is not None:
            while self.pending and self.pending[0]["update_id"] < offset:
                self.pending.popleft()  # confirmed
        deadline = time.monotonic() + min(timeout, 50)
        while not self.pending and time.monotonic() < deadline and not self._closing:
            self._new_update.clear()
            try:
                await asyncio.wait_for(
                    self._new_update.wait(), timeout=max(deadline - time.monotonic(), 0)
                )
            except TimeoutError:
                break
            if self.webhook["url"]:
                raise ApiError(409, "Conflict: terminated by setWebhook request")
        return list(itertools.islice(self.pending, 0, limit))

    async def _handle_file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        path = request.match_info["path"]
        fid = path.rsplit("/", 1)[-1]
        if fid not in self.files:
            return web.Response(status=404)
        self.calls.append(Call("downloadFile", {"path": path}, time.monotonic()))
        data, mime = self.files[fid]
        return web.Response(body=data, content_type=mime)

    # -- control API (for other processes) --------------------------------------------

    async def _ctl_update(self, request: web.Request) -> web.Response:
        update = orjson.loads(await request.read())
        if self.webhook["url"]:
            status = await self.deliver(update)
            return web.json_response({"delivered": status})
        self.queue_update(update)
        return web.json_response({"queued": len(self.pending)})

    async def _ctl_migrate(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        try:
            m = await self.migrate(int(body["chat_id"]))
        except (KeyError, TypeError, ValueError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"old": m.old, "new": m.new})

    async def _ctl_calls(self, request: web.Request) -> web.Response:
        return web.Response(
            body=orjson.dumps(
                [{"method": c.method, "params": c.params, "status": c.status} for c in self.calls]
            ),
            content_type="application/json",
        )

    async def _ctl_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})


async def _main(port: int, chat_interval: float | None) -> None:
    fake = FakeTelegram(chat_interval=chat_interval)
    await fake.start(port)
    print(f"fake Telegram Bot API: {fake.base_url}  token: {fake.token}", flush=True)
    print(f"TELEGRAM_API_BASE_URL={fake.base_url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await fake.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description="Fake Telegram Bot API server")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--chat-interval", type=float, default=None)
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.port, args.chat_interval))


if __name__ == "__main__":
    main()
