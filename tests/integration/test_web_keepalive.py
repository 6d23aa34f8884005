"""The web server keeps idle connections open longer than a proxy does."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from agent_core.settings import CoreSettings
from bots.runtime import make_server

REQUEST = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(REQUEST)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    await reader.readexactly(4)  # "pong"
    return head


@contextlib.asynccontextmanager
async def _serving(server: Any) -> AsyncIterator[None]:
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started, "the server did not start"
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_idle_connections_outlive_the_keepalive_they_are_given() -> None:
    async def ping(_request: object) -> PlainTextResponse:
        return PlainTextResponse("pong")

    app = Starlette(routes=[Route("/ping", ping)])
    port = _free_port()
    server = make_server(app, "127.0.0.1", port, keepalive_secs=1)
    async with _serving(server):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert b"200 OK" in await _ask(reader, writer)
        await asyncio.sleep(0.5)  # idle, within the keep-alive: the same connection works
        assert b"200 OK" in await _ask(reader, writer)
        await asyncio.sleep(1.6)  # idle past it: the server has closed the connection
        assert await asyncio.wait_for(reader.read(), 2) == b""
        writer.close()


def test_the_default_keepalive_outlasts_herokus_router() -> None:
    assert CoreSettings().web_keepalive_secs > 90  # the router closes idle ones at 90 s


async def test_requests_are_parsed_by_httptools_and_garbage_gets_a_400() -> None:
    """uvicorn picks httptools when it is installed (a dependency: ~110 µs less CPU
    per webhook than h11, bench/README.md hot spot 19); a request it cannot parse
    is answered 400 and the connection closed."""
    app = Starlette(routes=[])
    port = _free_port()
    server = make_server(app, "127.0.0.1", port)
    server.config.load()
    assert server.config.http_protocol_class.__name__ == "HttpToolsProtocol"
    async with _serving(server):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 5)
        assert answer.startswith(b"HTTP/1.1 400")
        writer.close()
