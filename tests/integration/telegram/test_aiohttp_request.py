"""channels.telegram.aiohttp_request through the real python-telegram-bot Bot, and
how the sender classifies its transport failures:

* no connection (nothing left the machine): repeated until ``max_retry_wait``,
  then SendFailed; a full pool is waited out instead of dropping the answer;
* sent, but no answer in time (Telegram may have stored it): SendUnconfirmed at
  once, never repeated;
* uploads go as multipart form data, plain calls as a urlencoded form.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from telegram import Bot, InputFile
from telegram.error import NetworkError, TimedOut

from agent_core.errors import SendFailed, SendUnconfirmed
from agent_core.events import OutboundMessage, ThreadKey
from agent_core.store.pacing import Pacer
from channels.telegram.aiohttp_request import AiohttpRequest
from channels.telegram.sender import Limits, TelegramOutbox
from tests.fakes.telegram import TOKEN

DM = ThreadKey("telegram", "bot", "42")
NO_PACE = Limits(chat_interval=0, group_interval=0, global_interval=0, max_retry_wait=5)


def _message(chat_id: int = 42, text: str = "x") -> dict[str, Any]:
    return {"message_id": 7, "date": 0, "chat": {"id": chat_id, "type": "private"}, "text": text}


class Server:
    """A Bot API endpoint that records requests; ``delay`` answers after storing."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.delay = 0.0
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        form = await request.post()
        fields = {
            k: (v.filename, v.file.read()) if isinstance(v, web.FileField) else v
            for k, v in form.items()
        }
        self.requests.append((method, request.content_type, fields))
        if self.delay:
            await asyncio.sleep(self.delay)
        if method == "getMe":
            user = {"id": 1, "is_bot": True, "first_name": "b", "username": "b"}
            return web.json_response({"ok": True, "result": user})
        return web.json_response({"ok": True, "result": _message(text=str(fields.get("text")))})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    s = Server()
    await s.start()
    yield s
    await s.stop()


def _bot(port: int, read_timeout: float = 5.0) -> Bot:
    return Bot(
        TOKEN,
        base_url=f"http://127.0.0.1:{port}/bot",
        request=AiohttpRequest(connection_pool_size=4, read_timeout=read_timeout),
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_form_and_multipart_bodies(server: Server) -> None:
    async with _bot(server.port) as bot:
        msg = await bot.send_message(42, "hello")
        assert msg.text == "hello"
        await bot.send_document(42, InputFile(b"abc", filename="a.txt"), caption="doc")
    (_, ctype1, f1), (_, ctype2, f2) = server.requests[-2:]
    assert ctype1 == "application/x-www-form-urlencoded" and f1["text"] == "hello"
    assert ctype2 == "multipart/form-data" and f2["caption"] == "doc"
    assert f2["document"] == ("a.txt", b"abc")


async def test_timeout_is_timed_out_with_the_cause(server: Server) -> None:
    bot = _bot(server.port, read_timeout=0.2)
    await bot.initialize()
    server.delay = 1.0
    try:
        with pytest.raises(TimedOut) as info:
            await bot.send_message(42, "slow")
        assert isinstance(info.value.__cause__, TimeoutError)
    finally:
        server.delay = 0.0
        await bot.shutdown()


async def test_refused_connection_is_network_error_with_the_cause() -> None:
    request = AiohttpRequest()
    await request.initialize()
    try:
        with pytest.raises(NetworkError) as info:
            await request.do_request(f"http://127.0.0.1:{_closed_port()}/x", "POST")
        assert isinstance(info.value.__cause__, aiohttp.ClientConnectorError)
    finally:
        await request.shutdown()


async def test_sender_repeats_a_call_that_never_left(redis: Any) -> None:
    bot = _bot(_closed_port())
    out = TelegramOutbox(bot, Pacer(redis), "bot", NO_PACE)
    with pytest.raises(SendFailed) as info:
        await out.send(DM, OutboundMessage("hi"))
    assert not isinstance(info.value, SendUnconfirmed)
    await bot.shutdown()


async def test_sender_never_repeats_a_call_whose_answer_was_lost(
    server: Server, redis: Any
) -> None:
    bot = _bot(server.port, read_timeout=0.2)
    await bot.initialize()
    server.delay = 0.5
    out = TelegramOutbox(bot, Pacer(redis), "bot", NO_PACE)
    try:
        with pytest.raises(SendUnconfirmed):
            await out.send(DM, OutboundMessage("stored once"))
        await asyncio.sleep(0.6)
        sends = [r for r in server.requests if r[0] == "sendMessage"]
        assert len(sends) == 1
    finally:
        server.delay = 0.0
        await bot.shutdown()


async def test_a_send_waits_out_a_full_connection_pool(server: Server, redis: Any) -> None:
    """Thousands of turns sending at once: a call that finds no free pooled
    connection within the connect timeout never left, so it waits for one (up to
    max_retry_wait) instead of failing the turn after three quick attempts
    (found by `parley bench inflight`: 159 answers dropped at 5,000 in flight)."""
    bot = Bot(
        TOKEN,
        base_url=f"http://127.0.0.1:{server.port}/bot",
        request=AiohttpRequest(connection_pool_size=1, pool_timeout=0.2, connect_timeout=0.2),
    )
    await bot.initialize()
    out = TelegramOutbox(
        bot,
        Pacer(redis),
        "bot",
        Limits(chat_interval=0, group_interval=0, global_interval=0, max_retry_wait=20),
    )
    try:
        server.delay = 4.0  # the first send holds the only connection for 4 s
        first = asyncio.create_task(out.send(DM, OutboundMessage("first")))
        while not any(r[0] == "sendMessage" for r in server.requests):
            await asyncio.sleep(0.01)
        server.delay = 0.0
        ref = await asyncio.wait_for(out.send(DM, OutboundMessage("second")), 15)
        assert ref.message_id == "7"
        await first
        texts = [r[2].get("text") for r in server.requests if r[0] == "sendMessage"]
        assert texts == ["first", "second"]  # each once
    finally:
        server.delay = 0.0
        await bot.shutdown()
