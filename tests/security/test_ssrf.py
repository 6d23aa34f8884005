"""``http_request`` never reaches private, loopback or metadata addresses unless allowed:
literal addresses in every spelling, DNS names resolving there, redirects there,
and a name that resolves to a public address for the check and to loopback for
the connection (DNS rebinding).

No traffic leaves 127.0.0.1: names are resolved by a fake resolver, and the
transport refuses (and records) any connection to anything but loopback.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from agent_core.events import ThreadKey
from agent_core.settings import CoreSettings
from agent_core.tools.base import ToolContext, ToolError
from agent_core.tools.http_request import HttpArgs, HttpRequest

PUBLIC = "93.184.216.34"  # example.com; never actually contacted


class GuardTransport(httpx.AsyncBaseTransport):
    """Lets requests through to loopback servers only; records anything else."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.escaped: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host not in ("127.0.0.1", "localhost") and not host.endswith(".test"):
            self.escaped.append(str(request.url))
            return httpx.Response(599, text="blocked by the test transport")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Target:
    """A loopback HTTP server: ``/secret`` (must never be hit), ``/to?u=`` redirects."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> Target:
        app = web.Application()

        async def handle(request: web.Request) -> web.StreamResponse:
            self.hits.append(request.path_qs)
            if request.path == "/to":
                raise web.HTTPFound(request.query["u"])
            return web.Response(text="internal secret")

        app.router.add_route("*", "/{tail:.*}", handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def secret_hits(self) -> list[str]:
        return [h for h in self.hits if h.startswith("/secret")]


@pytest.fixture
async def target() -> AsyncIterator[Target]:
    t = await Target().start()
    yield t
    await t.stop()


@pytest.fixture
async def dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """name -> addresses; each lookup pops the first (the last one stays)."""
    table: dict[str, list[str]] = {}
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo

    async def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name in table:
            addrs = table[name]
            ip = addrs.pop(0) if len(addrs) > 1 else addrs[0]
            fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
            return [(fam, socket.SOCK_STREAM, 6, "", (ip, int(port or 0)))]
        if name.endswith((".test", ".internal")):
            raise socket.gaierror(socket.EAI_NONAME, "unknown name (test resolver)")
        return await real(host, port, *args, **kwargs)  # literals and /etc/hosts only

    monkeypatch.setattr(loop, "getaddrinfo", fake)
    return table


async def _run(url: str, *, allowed: str = "", method: str = "GET") -> tuple[str, GuardTransport]:
    guard = GuardTransport()
    tool = HttpRequest(transport=guard)
    ctx = ToolContext(
        redis=None,  # type: ignore[arg-type]
        settings=CoreSettings(http_tool_allowed_hosts=allowed, http_tool_timeout_secs=5),
        thread=ThreadKey("web", "local", "ssrf", ""),
        user="web:u1",
    )
    try:
        out = await tool.run(HttpArgs(method=method, url=url), ctx)  # type: ignore[arg-type]
    except ToolError as exc:
        out = f"error: {exc}"
    finally:
        await tool.shutdown()
    return out, guard


LITERALS = [
    "http://127.0.0.1:{port}/secret",
    "http://127.1:{port}/secret",
    "http://2130706433:{port}/secret",  # 127.0.0.1 as one decimal number
    "http://0x7f000001:{port}/secret",
    "http://0177.0.0.1:{port}/secret",
    "http://[::1]:{port}/secret",
    "http://[::ffff:127.0.0.1]:{port}/secret",
    "http://[0:0:0:0:0:ffff:7f00:1]:{port}/secret",
    "http://0.0.0.0:{port}/secret",
    "http://localhost:{port}/secret",
    "http://LOCALHOST.:{port}/secret",
    "http://user:pw@127.0.0.1:{port}/secret",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://10.0.0.1/secret",
    "http://172.16.5.4/secret",
    "http://192.168.1.1/secret",
    "http://100.64.0.1/secret",
    "http://[fc00::1]/secret",
    "http://[fe80::1]/secret",
    "http://224.0.0.1/secret",
    "file:///etc/passwd",
    "gopher://127.0.0.1:{port}/_secret",
    "ftp://127.0.0.1/secret",
    "http:///secret",
]


@pytest.mark.parametrize("url", LITERALS)
async def test_private_literals_are_refused(
    url: str, target: Target, dns: dict[str, list[str]]
) -> None:
    out, guard = await _run(url.format(port=target.port))
    assert out.startswith("error: refused"), out
    assert target.secret_hits() == [] and guard.escaped == []


@pytest.mark.parametrize(
    "addr", ["127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "fd00::5", "::ffff:10.0.0.1"]
)
async def test_dns_names_resolving_to_private_addresses_are_refused(
    addr: str, target: Target, dns: dict[str, list[str]]
) -> None:
    dns["inside.test"] = [addr]
    out, guard = await _run(f"http://inside.test:{target.port}/secret")
    assert out.startswith("error: refused"), out
    assert target.secret_hits() == [] and guard.escaped == []


async def test_a_name_with_one_private_address_among_public_ones_is_refused(
    target: Target, dns: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()

    async def multi(host: Any, port: Any, *a: Any, **k: Any) -> Any:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC, port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
        ]

    monkeypatch.setattr(loop, "getaddrinfo", multi)
    out, guard = await _run(f"http://mixed.test:{target.port}/secret")
    assert out.startswith("error: refused"), out
    assert target.secret_hits() == [] and guard.escaped == []


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.1:{port}/secret",
        "http://localhost:{port}/secret",
        "http://[::1]:{port}/secret",
        "http://169.254.169.254/latest/meta-data/",
        "http://inside.test:{port}/secret",
        "//127.0.0.1:{port}/secret",
        "file:///etc/passwd",
    ],
)
async def test_redirects_to_private_addresses_are_refused(
    location: str, target: Target, dns: dict[str, list[str]]
) -> None:
    """The first hop is an allowed host; where it redirects to is checked again."""
    dns["redirector.test"] = ["127.0.0.1"]
    dns["inside.test"] = ["10.0.0.7"]
    loc = location.format(port=target.port)
    url = f"http://redirector.test:{target.port}/to?u={httpx.QueryParams({'u': loc})['u']}"
    out, guard = await _run(url, allowed="redirector.test")
    assert out.startswith("error: refused"), out
    assert [h for h in target.hits if h.startswith("/to")], "the allowed first hop was not made"
    assert target.secret_hits() == [] and guard.escaped == []


async def test_allowed_hosts_are_reachable(target: Target, dns: dict[str, list[str]]) -> None:
    out, _ = await _run(f"http://localhost:{target.port}/secret", allowed="localhost")
    assert out.startswith("HTTP 200") and "internal secret" in out
    assert target.secret_hits() == ["/secret"]


async def test_dns_rebinding_does_not_reach_loopback(
    target: Target, dns: dict[str, list[str]]
) -> None:
    dns["rebind.test"] = [PUBLIC, "127.0.0.1"]
    out, guard = await _run(f"http://rebind.test:{target.port}/secret")
    assert target.secret_hits() == [], out
    # Pinned: the one request went to the address that was checked (and stopped there
    # by the guard, which lets nothing leave 127.0.0.1), not to a second lookup's answer.
    assert guard.escaped == [f"http://{PUBLIC}:{target.port}/secret"]


class Recorder(httpx.AsyncBaseTransport):
    """Records every request; ``/r`` redirects to ``/next``, anything else is 200."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/r":
            return httpx.Response(302, headers={"Location": "/next"})
        return httpx.Response(200, text="ok")


async def test_pinned_request_names_the_host_for_http_and_tls(
    dns: dict[str, list[str]],
) -> None:
    """Connect to the checked address; Host header and SNI (thus the certificate check)
    keep the name; a relative redirect is resolved against the name and pinned again."""
    dns["pin.test"] = [PUBLIC, "93.184.215.14"]
    rec = Recorder()
    tool = HttpRequest(transport=rec)
    ctx = ToolContext(
        redis=None,  # type: ignore[arg-type]
        settings=CoreSettings(http_tool_timeout_secs=5),
        thread=ThreadKey("web", "local", "ssrf", ""),
        user="web:u1",
    )
    try:
        out = await tool.run(HttpArgs(url="https://pin.test:8443/r"), ctx)
    finally:
        await tool.shutdown()
    assert out.startswith("HTTP 200"), out
    first, second = rec.requests
    assert str(first.url) == f"https://{PUBLIC}:8443/r"
    assert str(second.url) == "https://93.184.215.14:8443/next"
    for req in rec.requests:
        assert req.headers["host"] == "pin.test:8443"
        assert req.extensions["sni_hostname"] == "pin.test"


async def test_redirect_is_pinned_again_on_rebinding(
    target: Target, dns: dict[str, list[str]]
) -> None:
    """A relative redirect re-resolves the name: a loopback answer then is refused."""
    dns["hop.test"] = [PUBLIC, "127.0.0.1"]
    rec = Recorder()
    tool = HttpRequest(transport=rec)
    ctx = ToolContext(
        redis=None,  # type: ignore[arg-type]
        settings=CoreSettings(http_tool_timeout_secs=5),
        thread=ThreadKey("web", "local", "ssrf", ""),
        user="web:u1",
    )
    try:
        with pytest.raises(ToolError, match="refused"):
            await tool.run(HttpArgs(url="http://hop.test/r"), ctx)
    finally:
        await tool.shutdown()
    assert [str(r.url) for r in rec.requests] == [f"http://{PUBLIC}/r"]
    assert rec.requests[0].headers["host"] == "hop.test"
    assert "sni_hostname" not in rec.requests[0].extensions


def test_only_safe_methods_run_without_approval() -> None:
    tool = HttpRequest()
    for m in ("GET", "HEAD"):
        assert not tool.needs_approval(HttpArgs(method=m, url="https://example.com"))  # type: ignore[arg-type]
    for m in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        assert tool.needs_approval(HttpArgs(method=m, url="https://example.com"))  # type: ignore[arg-type]
