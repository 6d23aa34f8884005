"""``http_request`` ignores HTTPS_PROXY / ALL_PROXY: it connects straight to the
address the SSRF check approved.  Through a proxy the pinned IP became the TLS
host name in the tunnel, and every https site failed certificate verification."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme

import agent_core.tools.http_request as hr
from agent_core.tools.http_request import HttpArgs, HttpRequest


async def _https_server(cert: trustme.LeafCert) -> asyncio.Server:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi")
        await w.drain()
        w.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)


async def _proxy(seen: list[str]) -> asyncio.Server:
    """A CONNECT proxy that tunnels to 127.0.0.1 and records each target."""

    async def pipe(a: asyncio.StreamReader, b: asyncio.StreamWriter) -> None:
        try:
            while data := await a.read(65_536):
                b.write(data)
                await b.drain()
        except Exception:
            pass
        finally:
            b.close()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head = await r.readuntil(b"\r\n\r\n")
        target = head.split()[1].decode()
        seen.append(target)
        r2, w2 = await asyncio.open_connection("127.0.0.1", int(target.rsplit(":", 1)[1]))
        w.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await w.drain()
        await asyncio.gather(pipe(r, w2), pipe(r2, w))

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize("var", ["HTTPS_PROXY", "ALL_PROXY", "https_proxy"])
async def test_https_works_and_skips_the_proxy_when_proxy_env_is_set(
    var: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))  # still honoured (a private CA)
    server = await _https_server(ca.issue_cert("example.test"))
    seen: list[str] = []
    proxy = await _proxy(seen)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv(var, f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}")

    async def resolved_public(url: str, allowed: frozenset[str]) -> tuple[str, ...]:
        return ("127.0.0.1",)  # as if example.test resolved to (and was checked as) public

    monkeypatch.setattr(hr, "check_url", resolved_public)
    ctx: Any = type("Ctx", (), {})()
    ctx.settings = type(
        "S",
        (),
        {"http_tool_timeout_secs": 5.0, "http_tool_allowed_hosts": "", "id_list": lambda s, v: []},
    )()
    tool = HttpRequest()
    try:
        out = await tool.run(HttpArgs(url=f"https://example.test:{port}/"), ctx)
    finally:
        await tool.shutdown()
        server.close()
        proxy.close()
    assert out.splitlines()[0] == "HTTP 200 OK", out
    assert out.endswith("hi")
    assert seen == []  # the proxy was never asked


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com:99999/",  # port out of range
        "http://example.com:abc/",  # not a number
        "http://[::1/",  # malformed IPv6 literal
        "https://[not-an-address]/",
    ],
)
async def test_a_bad_port_or_ipv6_literal_is_refused_without_a_traceback(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from agent_core.agent.executor import Planned, run_one
    from agent_core.events import ThreadKey
    from agent_core.llm.base import ToolCall
    from agent_core.settings import CoreSettings
    from agent_core.tools.base import ToolContext
    from agent_core.tools.ssrf import Refused, check_url

    with pytest.raises(Refused, match=r"^invalid URL: "):
        await check_url(url, frozenset())
    with pytest.raises(Refused, match=r"^invalid URL: "):
        await check_url(url, frozenset({"example.com"}))  # allowed hosts too
    ctx = ToolContext(
        redis=None,  # type: ignore[arg-type]
        settings=CoreSettings(http_tool_timeout_secs=5),
        thread=ThreadKey("web", "local", "badurl", ""),
        user="web:u1",
    )
    tool = HttpRequest()
    planned = Planned(ToolCall("c1", "http_request", {"url": url}), tool, HttpArgs(url=url))
    try:
        with caplog.at_level("DEBUG"):
            out = await run_one(planned, ctx, 10, 1000)
    finally:
        await tool.shutdown()
    assert out.startswith("error: refused: invalid URL: "), out
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
