"""The fake Discord's gateway: sessions that survive their connection (RESUME
replays what was missed), dispatch to the shards a guild belongs to, the websocket
(HELLO, IDENTIFY -> READY + GUILD_CREATE, heartbeats, RESUME or INVALID_SESSION,
zlib-stream transport compression) and its scripted faults."""

from __future__ import annotations

import secrets
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import WSMsgType, web

# application flags: GATEWAY_MESSAGE_CONTENT
FLAG_MESSAGE_CONTENT = 1 << 19
INTENT_MESSAGE_CONTENT = 1 << 15


@dataclass
class Session:
    """A gateway session: survives its connection so RESUME can replay."""

    id: str
    shard: tuple[int, int]
    seq: int = 0
    buffer: list[dict[str, Any]] = field(default_factory=list)
    conn: Connection | None = None
    valid: bool = True


class Connection:
    def __init__(self, ws: web.WebSocketResponse, compress: bool) -> None:
        self.ws = ws
        self._z = zlib.compressobj() if compress else None
        self.session: Session | None = None

    async def send(self, payload: dict[str, Any]) -> None:
        data = orjson.dumps(payload)
        if self.ws.closed:
            return
        try:
            if self._z is not None:
                await self.ws.send_bytes(self._z.compress(data) + self._z.flush(zlib.Z_SYNC_FLUSH))
            else:
                await self.ws.send_str(data.decode())
        except (ConnectionError, RuntimeError):
            pass


class GatewayMixin:
    """The gateway half of :class:`tests.fakes.discord.FakeDiscord`: sessions,
    dispatch, the websocket (HELLO, IDENTIFY, RESUME, heartbeats) and its faults."""

    app_id: str

    def _sessions_for(self, guild_id: str) -> list[Session]:
        out = []
        for s in self.sessions.values():
            if not s.valid:
                continue
            sid, count = s.shard
            if (guild_id and (int(guild_id) >> 22) % count == sid) or (not guild_id and sid == 0):
                out.append(s)
        return out

    async def dispatch(self, event: str, data: dict[str, Any], guild_id: str = "") -> None:
        for s in self._sessions_for(guild_id):
            s.seq += 1
            payload = {"op": 0, "t": event, "s": s.seq, "d": data}
            s.buffer.append(payload)
            if s.conn is not None:
                await s.conn.send(payload)
        self._poke()

    async def invalidate_sessions(self) -> None:
        """Every session becomes invalid (INVALID_SESSION d=false): the client must IDENTIFY anew."""
        for s in list(self.sessions.values()):
            s.valid = False
            if s.conn is not None:
                await s.conn.send({"op": 9, "d": False})
        self._poke()

    async def request_reconnect(self) -> None:
        """op 7 RECONNECT: the client should RESUME."""
        for s in list(self.sessions.values()):
            if s.conn is not None:
                await s.conn.send({"op": 7, "d": None})

    async def drop_connections(self, code: int = 4000) -> None:
        for conn in list(self.connections):
            await conn.ws.close(code=code)

    # --- gateway websocket ----------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        compress = request.query.get("compress", "")
        if compress and compress != "zlib-stream":
            await ws.close(code=4000, message=b"unsupported compression")
            return ws
        conn = Connection(ws, compress == "zlib-stream")
        self.connections.append(conn)
        self.transports.append(compress or "none")
        await conn.send({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT or msg.type == WSMsgType.BINARY:
                    await self._on_op(conn, orjson.loads(msg.data))
                else:
                    break
        finally:
            self.connections.remove(conn)
            if conn.session is not None and conn.session.conn is conn:
                conn.session.conn = None
            self._poke()
        return ws

    async def _on_op(self, conn: Connection, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        d = frame.get("d")
        if op == 1:
            self.heartbeats += 1
            await conn.send({"op": 11})
        elif op == 2:
            await self._identify(conn, d or {})
        elif op == 6:
            await self._resume(conn, d or {})
        self._poke()

    async def _identify(self, conn: Connection, d: dict[str, Any]) -> None:
        if d.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(d.get("intents") or 0)
        if intents & INTENT_MESSAGE_CONTENT and not self.message_content:
            await conn.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        shard = tuple(d.get("shard") or (0, 1))
        session = Session(id=secrets.token_hex(16), shard=(int(shard[0]), int(shard[1])), conn=conn)
        self.sessions[session.id] = session
        conn.session = session
        self.identifies.append(
            {"intents": intents, "shard": list(session.shard), "at": time.monotonic()}
        )
        guilds = [g for g in self.guilds if (int(g) >> 22) % session.shard[1] == session.shard[0]]
        session.seq += 1
        ready = {
            "op": 0,
            "t": "READY",
            "s": session.seq,
            "d": {
                "v": 10,
                "user": self.bot_user,
                "guilds": [{"id": g, "unavailable": True} for g in guilds],
                "session_id": session.id,
                "resume_gateway_url": self.gateway_url,
                "shard": list(session.shard),
                "application": {"id": self.app_id, "flags": self._app_flags()},
                "private_channels": [],
                "relationships": [],
            },
        }
        await conn.send(ready)
        for g in guilds:
            session.seq += 1
            await conn.send(
                {"op": 0, "t": "GUILD_CREATE", "s": session.seq, "d": self._guild_payload(g)}
            )

    async def _resume(self, conn: Connection, d: dict[str, Any]) -> None:
        session = self.sessions.get(str(d.get("session_id")))
        if session is None or not session.valid or d.get("token") != self.token:
            await conn.send({"op": 9, "d": False})
            return
        self.resumes.append({"session": session.id, "seq": d.get("seq"), "at": time.monotonic()})
        session.conn = conn
        conn.session = session
        seq = int(d.get("seq") or 0)
        for payload in session.buffer:
            if payload["s"] > seq:
                await conn.send(payload)
        session.seq += 1
        await conn.send({"op": 0, "t": "RESUMED", "s": session.seq, "d": {}})

    def _app_flags(self) -> int:
        return FLAG_MESSAGE_CONTENT if self.message_content else 0
