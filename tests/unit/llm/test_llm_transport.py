"""The HTTP transport under the backends: httpx's API over aiohttp's pool.

Wire failures must map to the same errors as with httpx's own transport (a
server hanging up mid-answer is not a connect timeout), connections must go
back to the pool after a stream read to the end, and a stream abandoned
mid-way must not hold its connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

from agent_core.llm.base import ChatMessage, CompletionRequest, TextDelta
from agent_core.llm.errors import InvalidResponse, RequestFailed
from agent_core.llm.http import MappedAiohttpTransport
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from tests.fakes.llm_servers import FakeLLMServer, openai_stream
from tests.unit.llm.conftest import config_for

HELLO = CompletionRequest((ChatMessage("user", "hello"),))

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class _Raw:
    """A bare TCP server on 127.0.0.1 that reads one request and runs ``answer``."""

    def __init__(self, answer: Handler) -> None:
        self.answer = answer
        self.server: asyncio.Server | None = None

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await r.read(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        if len(body) < length:
            await r.readexactly(length - len(body))
        await self.answer(r, w)
        w.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    async def __aenter__(self) -> _Raw:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def provider(server: Any, **kw: Any) -> OpenAIProvider:
    p = OpenAIProvider(config_for(server, "openai", **kw), PriceTable())
    await p.initialize()
    return p


def transport_of(p: OpenAIProvider) -> httpx.AsyncBaseTransport:
    return p.client._transport  # type: ignore[attr-defined,no-any-return]


async def test_default_transport_is_aiohttp_and_shutdown_closes_its_session(
    server: FakeLLMServer,
) -> None:
    p = await provider(server)
    t = transport_of(p)
    assert isinstance(t, MappedAiohttpTransport)
    await p.complete(HELLO)
    session = t.client
    assert isinstance(session, aiohttp.ClientSession) and not session.closed
    await p.shutdown()
    assert session.closed


async def test_an_injected_transport_wins(server: FakeLLMServer) -> None:
    injected = httpx.AsyncHTTPTransport()
    p = OpenAIProvider(config_for(server, "openai"), PriceTable(), transport=injected)
    await p.initialize()
    assert transport_of(p) is injected
    assert (await p.complete(HELLO)).text == "echo: hello"
    await p.shutdown()


async def test_a_proxy_from_the_environment_keeps_httpx_own_transport(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    p = await provider(server)
    assert not isinstance(transport_of(p), MappedAiohttpTransport)
    await p.shutdown()


async def _hang_up(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    return None  # close without a word


async def _garbage(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    w.write(b"HELLO WORLD\r\n\r\n")
    await w.drain()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("answer", [_hang_up, _garbage])
async def test_a_server_hanging_up_or_talking_nonsense_is_invalid_response(
    answer: Handler, stream: bool
) -> None:
    async with _Raw(answer) as raw:
        p = await provider(raw)
        with pytest.raises(InvalidResponse, match="closed mid-answer"):
            if stream:
                async for _ in p.stream(HELLO):
                    pass
            else:
                await p.complete(HELLO)
        await p.shutdown()


async def test_connection_refused_is_request_failed_not_a_timeout() -> None:
    srv = FakeLLMServer()
    await srv.start()
    await srv.stop()
    p = await provider(srv, llm_connect_timeout_secs=5.0)
    with pytest.raises(RequestFailed, match="cannot connect"):
        await p.complete(HELLO)
    await p.shutdown()


class _PeerServer(FakeLLMServer):
    """The fake server, noting the client port of every request."""

    def __init__(self) -> None:
        super().__init__()
        self.peers: list[Any] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        self.peers.append(request.transport.get_extra_info("peername"))
        return await super()._handle(request)


@pytest.fixture
async def peer_server() -> AsyncIterator[_PeerServer]:
    async with _PeerServer() as srv:
        yield srv


async def test_streams_read_to_the_end_reuse_one_connection(peer_server: _PeerServer) -> None:
    p = await provider(peer_server)
    for _ in range(3):
        items = [i async for i in p.stream(HELLO)]
        assert items[-1].text == "echo: hello"  # type: ignore[union-attr]
        await p.complete(HELLO)
    await p.shutdown()
    assert len(peer_server.peers) == 6
    assert len(set(peer_server.peers)) == 1


async def test_a_stream_abandoned_mid_way_does_not_hold_its_connection(
    peer_server: _PeerServer,
) -> None:
    # One connection in the pool: a leaked one would make the last call wait.
    p = await provider(peer_server, llm_pool_size=1, llm_timeout_secs=3.0)
    for _ in range(3):
        peer_server.push(openai_stream(["a ", "b ", "c"], event_delay=0.5))
        first = asyncio.get_running_loop().create_future()

        async def read(fut: asyncio.Future[None] = first) -> None:
            async for item in p.stream(HELLO):
                if isinstance(item, TextDelta) and not fut.done():
                    fut.set_result(None)

        task = asyncio.create_task(read())
        await asyncio.wait_for(first, 3.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # and one broken off by the reader (the generator closed early)
        peer_server.push(openai_stream(["x ", "y ", "z"], event_delay=0.5))
        gen = p.stream(HELLO)
        async for item in gen:
            if isinstance(item, TextDelta):
                break
        await gen.aclose()  # type: ignore[attr-defined]
    out = await asyncio.wait_for(p.complete(HELLO), 3.0)
    assert out.text == "echo: hello"
    await p.shutdown()
