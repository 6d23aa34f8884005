"""Interactions in the fake Discord: button presses and slash commands dispatched
to the bot (``_interact``, ``redeliver``), the callback that acknowledges one (once,
within 3 s), follow-ups through the interaction's webhook, the global application
commands (``GET|PUT /applications/{app}/commands``, checked in
:mod:`tests.fakes.discord_commands`), and what a message body must be."""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.discord_commands import check_commands, stored_commands

# View Channel, Send Messages, Embed Links, Attach Files, Read Message History,
# Send Messages in Threads: what the invite URL in docs/discord.md grants
BOT_PERMISSIONS = (1 << 10) | (1 << 11) | (1 << 14) | (1 << 15) | (1 << 16) | (1 << 38)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


class _Error(Exception):
    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers or {}


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(data), status=status, content_type="application/json", headers=headers
    )


class InteractionsMixin:
    """The interactions half of :class:`tests.fakes.discord.FakeDiscord`."""

    app_id: str

    async def redeliver(self, inter: dict[str, Any]) -> None:
        """The same INTERACTION_CREATE again (as a replay after a resume may)."""
        payload = {k: v for k, v in inter.items() if not k.startswith("_")}
        await self.dispatch("INTERACTION_CREATE", payload, str(inter.get("guild_id") or ""))

    async def _interact(
        self,
        kind: int,
        channel_id: str,
        data: dict[str, Any],
        user: dict[str, Any],
        *,
        message: dict[str, Any] | None = None,
        context: int | None = None,
        nick: str = "",
    ) -> dict[str, Any]:
        guild_id = self.guild_of(channel_id)
        full_user = {"discriminator": "0", "avatar": None, **user}
        inter: dict[str, Any] = {
            "id": self.snowflake(),
            "application_id": self.app_id,
            "type": kind,
            "token": "aW50ZXJhY3Rpb246" + secrets.token_urlsafe(48),
            "version": 1,
            "channel_id": channel_id,
            "channel": self.channels[channel_id],
            "data": data,
            "app_permissions": str(self.bot_permissions.get(channel_id, BOT_PERMISSIONS)),
            "attachment_size_limit": 10 * 1024 * 1024,
            "locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": guild_id} if guild_id else {"1": user["id"]},
            "context": context if context is not None else 0 if guild_id else 1,
        }
        if message is not None:
            inter["message"] = message
        if guild_id:
            inter["guild_id"] = guild_id
            inter["guild_locale"] = "en-US"
            inter["member"] = {
                "user": full_user,
                "roles": [],
                "joined_at": _now_iso(),
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": "1071698660929",
            }
            if nick:
                inter["member"]["nick"] = nick
        else:
            inter["user"] = full_user
        self.interactions[inter["id"]] = {**inter, "_at": time.monotonic(), "_answered": None}
        await self.dispatch("INTERACTION_CREATE", inter, guild_id)
        return inter

    def _check_message(self, body: Any, *, partial: bool = False) -> None:
        if not isinstance(body, dict):
            raise _Error(400, {"message": "Cannot send an empty message", "code": 50006})
        content = body.get("content")
        if content is not None and len(content) > 2000:
            raise _Error(
                400,
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}},
                },
            )
        if not partial and not content and not body.get("components"):
            raise _Error(400, {"message": "Cannot send an empty message", "code": 50006})
        for row in body.get("components") or ():
            for comp in row.get("components", ()):
                cid = comp.get("custom_id", "")
                if not cid or len(cid) > 100:
                    raise _Error(400, {"message": "Invalid Form Body", "code": 50035})

    def _commands(self, method: str, app_id: str, body: Any) -> web.Response:
        if app_id != self.app_id:
            raise _Error(403, {"message": "Missing Access", "code": 50001})
        if method == "GET":
            return _json(self.app_commands.get(app_id, []))
        if method != "PUT":
            raise _Error(405, {"message": "405: Method Not Allowed", "code": 0})
        self.command_puts += 1
        refused = check_commands(body)
        if refused is not None:
            raise _Error(400, refused)
        old = self.app_commands.get(app_id, [])
        self.app_commands[app_id] = stored_commands(app_id, body, old, self.snowflake)
        return _json(self.app_commands[app_id])

    def command(self, name: str, app_id: str | None = None) -> dict[str, Any] | None:
        """The registered global command ``name``, as Discord returns it."""
        app = app_id or self.app_id
        return next((c for c in self.app_commands.get(app, []) if c["name"] == name), None)

    async def _callback(self, interaction_id: str, token: str, body: Any) -> web.Response:
        inter = self.interactions.get(interaction_id)
        if inter is None or inter["token"] != token:
            raise _Error(404, {"message": "Unknown interaction", "code": 10062})
        if time.monotonic() - inter["_at"] > 3.0:
            raise _Error(404, {"message": "Unknown interaction", "code": 10062})
        if inter["_answered"] is not None:
            raise _Error(
                400, {"message": "Interaction has already been acknowledged.", "code": 40060}
            )
        kind = body.get("type") if isinstance(body, dict) else None
        data = body.get("data") if isinstance(body, dict) else None
        if kind == 4:
            self._check_message(data)
        inter["_answered"] = {"body": body, "latency": time.monotonic() - inter["_at"]}
        if kind == 4 and isinstance(data, dict) and not int(data.get("flags") or 0) & 64:
            # a visible response is a message of the bot's (type 20 under a slash
            # command), shown with "<user> used /<name>"; an ephemeral one is not kept
            await self._response_message(inter, data)
        return web.Response(status=204)

    async def _response_message(self, inter: dict[str, Any], data: dict[str, Any]) -> None:
        channel_id = inter["channel_id"]
        msg = self._message(channel_id, self.bot_user, data.get("content") or "")
        msg["webhook_id"] = self.app_id
        msg["application_id"] = self.app_id
        msg["type"] = 20 if inter["type"] == 2 else 0
        user = (inter.get("member") or {}).get("user") or inter.get("user")
        msg["interaction_metadata"] = {
            "id": inter["id"],
            "type": inter["type"],
            "user": user,
            "name": inter["data"].get("name", ""),
        }
        await self.dispatch("MESSAGE_CREATE", self._with_guild(msg), self.guild_of(channel_id))

    def _followup(self, app_id: str, token: str, body: Any) -> web.Response:
        inter = next((i for i in self.interactions.values() if i["token"] == token), None)
        if inter is None or app_id != self.app_id:
            raise _Error(404, {"message": "Unknown Webhook", "code": 10015})
        if inter["_answered"] is None:
            raise _Error(400, {"message": "Unknown interaction (not acknowledged)", "code": 10062})
        self._check_message(body)
        msg = self._message(inter["channel_id"], self.bot_user, body.get("content") or "")
        msg["flags"] = int(body.get("flags") or 0)
        msg["webhook_id"] = self.app_id
        self.messages[inter["channel_id"]].pop(msg["id"], None)  # ephemeral: not in history
        return _json(msg)
