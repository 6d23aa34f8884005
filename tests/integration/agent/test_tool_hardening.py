"""Tool hardening: http_request redirects across hosts, IPv6 forms of private
addresses, compressed bodies; run_shell's environment, timeout and approvals."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import tracemalloc
from typing import Any

import httpx
import pytest

from agent_core.agent.executor import Planned, run_one
from agent_core.events import EventKind, ThreadKey
from agent_core.llm.base import ToolCall
from agent_core.settings import CoreSettings
from agent_core.tools.base import ToolContext, ToolError
from agent_core.tools.current_time import CurrentTime, TimeArgs
from agent_core.tools.http_request import MAX_BODY, HttpArgs, HttpRequest
from agent_core.tools.shell import RunShell, ShellArgs
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event
from tests.security.test_ssrf import PUBLIC, dns  # noqa: F401

OTHER = "93.184.215.14"


def ctx(**settings: Any) -> ToolContext:
    return ToolContext(
        redis=None,  # type: ignore[arg-type]
        settings=CoreSettings(http_tool_timeout_secs=5, **settings),
        thread=ThreadKey("web", "local", "audit", ""),
        user="web:u1",
    )


class Hops(httpx.AsyncBaseTransport):
    """First host redirects (``status``) to http://b.test/landing; records every request."""

    def __init__(self, status: int = 302) -> None:
        self.status = status
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.requests.append(request)
        if request.headers.get("host") == "a.test":
            return httpx.Response(self.status, headers={"Location": "http://b.test/landing"})
        return httpx.Response(200, text="landed")


# --- http_request: redirects ---------------------------------------------------------
async def test_credentials_are_not_forwarded_to_another_host_on_redirect(
    dns: dict[str, list[str]],  # noqa: F811
) -> None:
    """The model calls api a.test with an Authorization header (a token the user gave
    it); a.test redirects to b.test; the manual redirect loop sends args.headers on every
    hop, so b.test receives the token (httpx/requests/browsers strip it cross-origin)."""
    dns["a.test"], dns["b.test"] = [PUBLIC], [OTHER]
    rec = Hops()
    tool = HttpRequest(transport=rec)
    try:
        args = HttpArgs(
            url="http://a.test/api",
            headers={"Authorization": "Bearer user-secret", "Cookie": "sid=user-secret"},
        )
        await tool.run(args, ctx())
    finally:
        await tool.shutdown()
    second = rec.requests[-1]
    assert second.headers["host"] == "b.test"
    assert "user-secret" not in str(dict(second.headers)), dict(second.headers)


@pytest.mark.parametrize("status", [307, 308])
async def test_approved_post_is_not_replayed_to_another_host_on_redirect(
    dns: dict[str, list[str]],  # noqa: F811
    status: int,
) -> None:
    """The user approved "POST http://a.test/api"; a 307/308 from a.test makes the tool
    POST the same body to b.test, a host nobody approved."""
    dns["a.test"], dns["b.test"] = [PUBLIC], [OTHER]
    rec = Hops(status)
    tool = HttpRequest(transport=rec)
    try:
        args = HttpArgs(method="POST", url="http://a.test/api", body="transfer=1000")
        with contextlib.suppress(ToolError):  # refusing the hop is one acceptable fix
            await tool.run(args, ctx())
    finally:
        await tool.shutdown()
    posted = [(r.method, r.headers["host"]) for r in rec.requests]
    assert ("POST", "b.test") not in posted, posted


# --- http_request: address rules -----------------------------------------------------
@pytest.mark.parametrize(
    "addr",
    [
        "2002:a9fe:a9fe::1",  # 6to4 embedding 169.254.169.254
        "2002:7f00:1::1",  # 6to4 embedding 127.0.0.1
        "fec0::1",  # deprecated site-local (still routed as internal on some networks)
    ],
)
async def test_ipv6_forms_embedding_private_ipv4_are_refused(
    dns: dict[str, list[str]],  # noqa: F811
    addr: str,
) -> None:
    """address_refused unwraps IPv4-mapped addresses only; 6to4 (2002::/16) forms of
    metadata / loopback and site-local fec0::/10 pass as 'public'."""
    dns["six.test"] = [addr]
    rec = Hops()
    tool = HttpRequest(transport=rec)
    try:
        with pytest.raises(ToolError, match="refused"):
            await tool.run(HttpArgs(url="http://six.test/latest/meta-data/"), ctx())
    finally:
        await tool.shutdown()
    assert rec.requests == []


# --- http_request: body limit on compressed bodies ------------------------------------
async def test_compressed_body_is_capped_before_it_is_inflated() -> None:
    """A server may send gzip despite `accept-encoding: identity`: a ~30 KB body that
    inflates to 30 MB costs at most about MAX_BODY in memory (inflated with the cap
    on the output, not a whole network chunk at a time)."""
    from aiohttp import web

    from tests.security.test_ssrf import GuardTransport

    blob = gzip.compress(b"\0" * 30_000_000, compresslevel=9)

    async def bomb(request: web.Request) -> web.Response:
        assert request.headers.get("accept-encoding") == "identity"
        return web.Response(body=blob, headers={"Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/", bomb)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(runner.addresses[0][1])
    tool = HttpRequest(transport=GuardTransport())
    tracemalloc.start()
    try:
        out = await tool.run(
            HttpArgs(url=f"http://127.0.0.1:{port}/"), ctx(http_tool_allowed_hosts="127.0.0.1")
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await tool.shutdown()
        await runner.cleanup()
    assert out.startswith("HTTP 200")
    assert peak < 5 * MAX_BODY, f"peak memory {peak / 1e6:.0f} MB for a 1 MB cap"


# --- run_shell ---------------------------------------------------------------------------
async def test_shell_does_not_see_the_services_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/security.md: "the model never sees tokens or keys". run_shell inherits the
    whole process environment, so any approved command (or anything it runs) reads
    LLM_API_KEY, bot tokens and REDIS_URL (the 'master key'), and the output goes back
    to the model."""
    secrets = {
        "LLM_API_KEY": "sk-audit-llm-key",
        "TELEGRAM_BOT_TOKEN": "123:audit-bot-token",
        "REDIS_URL": "redis://:audit-redis-pw@localhost:6379/0",
        "SLACK_BOT_TOKEN": "xoxb-audit-slack",
    }
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    out = await RunShell().run(ShellArgs(command="env"), ctx(shell_tool_timeout_secs=5))
    leaked = [k for k, v in secrets.items() if v in out]
    assert leaked == [], f"visible to the shell (and the model): {leaked}"


async def test_shell_timeout_leaves_no_process_behind(tmp_path: Any) -> None:
    """The timeout kills the command's process group; a child that starts its own session
    (setsid, daemonising tools, `nohup setsid …`) keeps running after the 'killed' error."""
    marker = tmp_path / "still-running"
    cmd = f"setsid sh -c 'sleep 2; touch {marker}' & sleep 30"
    with pytest.raises(ToolError, match="killed"):
        await RunShell().run(ShellArgs(command=cmd), ctx(shell_tool_timeout_secs=0.5))
    await asyncio.sleep(2.5)
    assert not marker.exists(), "a process of the killed command ran on after the timeout"


async def test_a_missing_shell_workdir_is_named(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """SHELL_TOOL_WORKDIR pointing nowhere (a typo, a volume not mounted): every command
    failed with "could not start the command: No such file or directory", as if the
    command was not found; the model rewrote it again and again, the log said nothing."""
    missing = tmp_path / "not-there"
    with pytest.raises(ToolError) as err:
        await RunShell().run(ShellArgs(command="echo hi"), ctx(shell_tool_workdir=str(missing)))
    assert str(err.value) == (
        f"could not start the command: its working directory {missing} (SHELL_TOOL_WORKDIR) "
        "does not exist or is not a directory; the operator must fix the setting"
    )
    assert any("SHELL_TOOL_WORKDIR" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "zone", ["America", "America/Argentina", "Europe/", "Nowhere/City", "../etc"]
)
async def test_a_zone_that_is_no_timezone_is_an_unknown_timezone(zone: str) -> None:
    """ "America" is a directory of the tz database: ZoneInfo raised IsADirectoryError,
    which the tool did not catch ("current_time failed", an ERROR traceback)."""
    p = Planned(
        ToolCall("c1", "current_time", {"timezone": zone}), CurrentTime(), TimeArgs(timezone=zone)
    )
    out = await run_one(p, ctx(), 10.0, 10_000)
    assert out == f"error: unknown timezone {zone!r}"


# --- approvals: "Always" on run_shell -----------------------------------------------------
async def test_always_on_run_shell_does_not_skip_later_approvals(world: Any) -> None:
    """run_shell: "every call asks" (docs/tools.md, shell.py). One "Always" press makes
    every later run_shell call in that conversation run without asking — including calls
    the model makes because a fetched web page told it to."""
    model = FnModel(
        tools_then_answer(
            ("first", [call("run_shell", command="echo one")]),
            ("second", [call("run_shell", command="echo two")]),
        )
    )
    w = world(model, enable_shell_tool=True)
    await w.start()
    t = ThreadKey("telegram", "bot1", "42")
    await w.send(user_event(t, "first", "42"))
    await w.settle(t)
    (prompt,) = w.prompts(t)
    aid = prompt.message.buttons[0].payload.split(":")[1]
    await w.send(user_event(t, "", "42", kind=EventKind.ACTION, token=f"ap:{aid}:w"))
    await w.settle(t)
    assert "one" in w.texts(t)[-1]
    await w.send(user_event(t, "second", "42"))
    await w.settle(t)
    assert len(w.prompts(t)) == 2, "the second shell command ran without asking"
