"""Downloading a user's file (channels/download.py): own hosts only, no redirects, capped."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from agent_core.errors import SendFailed
from channels.download import fetch_capped, origin


@pytest.fixture
async def host() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    async def small(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(body=b"x" * 100, content_type="image/png")

    async def chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for _ in range(100):
            await resp.write(b"y" * 1000)
        return resp

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("/small")

    async def gone(request: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/small", small)
    app.router.add_get("/chunked", chunked)
    app.router.add_get("/moved", moved)
    app.router.add_get("/gone", gone)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_a_file_from_an_allowed_host_arrives_with_its_type(host: tuple[str, list]) -> None:
    base, seen = host
    async with aiohttp.ClientSession() as s:
        data, ctype = await fetch_capped(
            s, base + "/small", origins={base}, max_bytes=100, headers={"Authorization": "B t"}
        )
    assert (data, ctype) == (b"x" * 100, "image/png")
    assert seen[0]["Authorization"] == "B t"


@pytest.mark.parametrize(
    ("path", "cap", "error"),
    [
        ("/small", 99, "larger than 99 bytes"),  # declared length over the cap
        ("/chunked", 5000, "larger than 5000 bytes"),  # no length: cut while reading
        ("/moved", 10**6, "redirected (HTTP 302)"),
        ("/gone", 10**6, "HTTP 404"),
    ],
)
async def test_refusals(host: tuple[str, list], path: str, cap: int, error: str) -> None:
    base, seen = host
    async with aiohttp.ClientSession() as s:
        with pytest.raises(SendFailed, match=error.replace("(", r"\(").replace(")", r"\)")):
            await fetch_capped(s, base + path, origins={base}, max_bytes=cap)
    if path == "/moved":
        assert seen == []  # the redirect was not followed


async def test_other_hosts_never_see_the_request(host: tuple[str, list]) -> None:
    base, seen = host
    async with aiohttp.ClientSession() as s:
        for url in (base + "/small", "https://evil.example/x", "file:///etc/passwd", ""):
            with pytest.raises(SendFailed, match="file host"):
                await fetch_capped(s, url, origins={"https://files.slack.com"}, max_bytes=10**6)
    assert seen == []


def test_origin() -> None:
    assert origin("https://files.slack.com/files-pri/T1-F1/a.png") == "https://files.slack.com"
    assert origin("http://127.0.0.1:8081/api/") == "http://127.0.0.1:8081"
    assert origin("https://cdn.discordapp.com:443/x") == "https://cdn.discordapp.com"
    assert origin("not a url") == ""
