"""run_shell returns when the command exits (what it left in the background is
stopped), http_request's timeout bounds the whole request, not each read, and each
has its own limit (SHELL_ / HTTP_TOOL_TIMEOUT_SECS, not TOOL_TIMEOUT_SECS); a tool's
bug (a result that is not text, a failing approval policy) is one call's error."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from pydantic import BaseModel

from agent_core.agent.executor import DATA_MARK, Planned, plan, run_many, run_one
from agent_core.agent.hooks import Hooks, ToolHookContext
from agent_core.events import ThreadKey
from agent_core.llm.base import ToolCall
from agent_core.settings import CoreSettings
from agent_core.tools.base import Tool, ToolContext
from agent_core.tools.http_request import HttpArgs, HttpRequest
from agent_core.tools.registry import ToolRegistry
from agent_core.tools.shell import RunShell, ShellArgs

HOOK_CTX = ToolHookContext(ThreadKey("web", "local", "tools", ""), "web:u1")


def ctx(**settings: Any) -> ToolContext:
    return ToolContext(
        redis=None,  # type: ignore[arg-type]
        settings=CoreSettings(**settings),
        thread=ThreadKey("web", "local", "tools", ""),
        user="web:u1",
    )


async def test_a_command_that_starts_a_background_job_returns_its_output() -> None:
    # the background job keeps the output pipe open: reading to its end waited the
    # whole timeout and reported "did not finish", losing the output
    out = await RunShell().run(
        ShellArgs(command="sleep 60 & echo started $!"), ctx(shell_tool_timeout_secs=20)
    )
    assert out.startswith("exit code 0\nstarted ")
    pid = int(out.split()[-1])
    for _ in range(100):  # what it left running was stopped
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail(f"the background job {pid} is still running")


async def test_the_http_timeout_bounds_a_slowly_trickling_response() -> None:
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n")
        for _ in range(12):  # a byte every 0.5 s: no single read waits 1 s
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.5)
        writer.close()

    server = await asyncio.start_server(trickle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    tool = HttpRequest()
    try:
        # bounded by the tool's time, not by each read: what came by then, with a note
        out = await tool.run(
            HttpArgs(url=f"http://127.0.0.1:{port}/"),
            ctx(http_tool_timeout_secs=1, http_tool_allowed_hosts="127.0.0.1"),
        )
    finally:
        await tool.shutdown()
        server.close()
    assert out.startswith("HTTP 200") and "x" in out.split("\n\n", 1)[1], out
    assert "time limit of 1 s ran out" in out, out


async def test_shell_timeout_setting_is_honoured_when_above_tool_timeout(tmp_path) -> None:
    # An operator raises SHELL_TOOL_TIMEOUT_SECS for a slow command: TOOL_TIMEOUT_SECS
    # (default 60) cut it before its own limit.
    c = ctx(tool_timeout_secs=1, shell_tool_timeout_secs=10, shell_tool_workdir=str(tmp_path))
    tool = RunShell()
    p = Planned(ToolCall("c1", "run_shell", {}), tool, ShellArgs(command="sleep 2; echo done"))
    out = await run_one(p, c, c.settings.tool_timeout_secs, 16_000)
    assert "done" in out, out


async def test_http_timeout_setting_is_honoured_when_above_tool_timeout() -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(2)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(slow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    c = ctx(tool_timeout_secs=1, http_tool_timeout_secs=10, http_tool_allowed_hosts="127.0.0.1")
    tool = HttpRequest()
    try:
        p = Planned(
            ToolCall("c1", "http_request", {}), tool, HttpArgs(url=f"http://127.0.0.1:{port}/")
        )
        out = await run_one(p, c, c.settings.tool_timeout_secs, 16_000)
    finally:
        await tool.shutdown()
        server.close()
    assert "HTTP 200" in out, out


async def test_http_page_with_non_text_charset_is_shown_not_a_failure() -> None:
    # A server labels its page charset=base64 (Python's codec, no text encoding): the
    # tool failed with LookupError (a traceback in the log) instead of showing the page.
    async def page(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b"hello world"
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=base64\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(page, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    c = ctx(http_tool_allowed_hosts="127.0.0.1")
    tool = HttpRequest()
    try:
        p = Planned(
            ToolCall("c1", "http_request", {}), tool, HttpArgs(url=f"http://127.0.0.1:{port}/")
        )
        out = await run_one(p, c, 60, 16_000)
    finally:
        await tool.shutdown()
        server.close()
    assert "HTTP 200" in out, out


async def _serve_once(head: bytes, body: bytes) -> tuple[asyncio.Server, str]:
    """A server answering each request with ``head`` and ``body`` then closing."""

    async def page(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(page, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"


@pytest.mark.parametrize(
    ("charset", "body"),
    [
        ("utf-7", b"hi +2AA- there"),
        ("UTF7", b"hi +2AA- there"),
        ("unicode_escape", b"hi \\ud800 there"),
        ("raw_unicode_escape", b"hi \\ud800 there"),
        ("rot13", b"hi there"),
        ("base64", b"hi there"),
    ],
)
async def test_http_page_in_a_codec_no_web_page_uses_is_read_as_utf8(
    charset: str, body: bytes
) -> None:
    # UTF-7 and unicode_escape are text encodings to Python whose decoding gives lone
    # surrogates: the output could not be saved and the turn failed
    head = (
        f"HTTP/1.1 200 OK\r\ncontent-type: text/html; charset={charset}\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    server, url = await _serve_once(head, body)
    tool = HttpRequest()
    try:
        out = await tool.run(HttpArgs(url=url), ctx(http_tool_allowed_hosts="127.0.0.1"))
    finally:
        await tool.shutdown()
        server.close()
    assert out.endswith("\n\n" + body.decode()), out  # as UTF-8, shown as it is


async def test_http_page_in_a_real_charset_is_decoded_in_it() -> None:
    body = "café".encode("latin-1")
    head = (
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=ISO-8859-1\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    server, url = await _serve_once(head, body)
    tool = HttpRequest()
    try:
        out = await tool.run(HttpArgs(url=url), ctx(http_tool_allowed_hosts="127.0.0.1"))
    finally:
        await tool.shutdown()
        server.close()
    assert out.endswith("\n\ncafé"), out


async def test_http_body_cut_short_is_shown_with_what_arrived() -> None:
    # the server closes before the content-length it announced: the error came out of
    # the body's reading, outside the request's error handling (an ERROR traceback,
    # "http_request failed (RemoteProtocolError)", what had arrived lost)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: text/plain\r\n\r\n"
    server, url = await _serve_once(head, b"partial body")
    c = ctx(http_tool_allowed_hosts="127.0.0.1", http_tool_timeout_secs=20)
    tool = HttpRequest()
    try:
        p = Planned(ToolCall("c1", "http_request", {}), tool, HttpArgs(url=url))
        out = await run_one(p, c, 60, 16_000)
    finally:
        await tool.shutdown()
        server.close()
    assert out.startswith(DATA_MARK.format(name="http_request") + "HTTP 200 OK\n"), out
    assert "\n\npartial body\n\n(the response was cut short after 12 bytes: " in out, out
    assert "RemoteProtocolError" in out, out


class NoneArgs(BaseModel):
    pass


class ReturnsNone(Tool[NoneArgs]):
    name = "returns_none"
    description = "a tool with a bug: returns None"
    args_model = NoneArgs

    async def run(self, args: NoneArgs, ctx: ToolContext) -> str:
        return None  # type: ignore[return-value]


class Slowish(Tool[NoneArgs]):
    name = "slowish"
    description = "takes a moment"
    args_model = NoneArgs
    finished = False

    async def run(self, args: NoneArgs, ctx: ToolContext) -> str:
        await asyncio.sleep(0.3)
        Slowish.finished = True
        return "slow ok"


async def test_a_tool_returning_non_text_is_an_error_result_not_a_crash() -> None:
    # A buggy tool's return value was capped outside run_one's try: the TaskGroup
    # raised, the call beside it was cancelled and the whole turn failed.
    c = ctx()
    planned = [
        Planned(ToolCall("a", "returns_none", {}), ReturnsNone(), NoneArgs()),
        Planned(ToolCall("b", "slowish", {}), Slowish(), NoneArgs()),
    ]
    outs = await run_many(planned, c, 60, 16_000)
    assert outs[0].startswith("error:") and outs[1] == "slow ok", outs


class Surrogates(Tool[NoneArgs]):
    name = "surrogates"
    description = "returns text decoded with surrogateescape, as a tool may"
    args_model = NoneArgs

    async def run(self, args: NoneArgs, ctx: ToolContext) -> str:
        return b"caf\xe9 \xff".decode("utf-8", "surrogateescape") + "\ud83d\ude00"


async def test_a_tools_lone_surrogates_are_replaced() -> None:
    """Text with lone surrogates would fail the session's save (orjson): every tool's
    output is made valid Unicode (a pair written as two code points joins up)."""
    p = Planned(ToolCall("a", "surrogates", {}), Surrogates(), NoneArgs())
    out = await run_one(p, ctx(), 60, 16_000)
    assert out == "caf\ufffd \ufffd\U0001f600"


class RaisesTimeout(Tool[NoneArgs]):
    name = "raises_timeout"
    description = "fails at once with its own TimeoutError"
    args_model = NoneArgs

    async def run(self, args: NoneArgs, ctx: ToolContext) -> str:
        raise TimeoutError


class PolicyFails(Tool[NoneArgs]):
    name = "policy_fails"
    description = "its approval policy raises"
    args_model = NoneArgs

    def needs_approval(self, args: NoneArgs) -> bool:
        raise RuntimeError("bug")

    async def run(self, args: NoneArgs, ctx: ToolContext) -> str:
        raise AssertionError("never run")


async def test_a_tools_own_timeout_error_is_not_called_a_timeout() -> None:
    p = Planned(ToolCall("a", "raises_timeout", {}), RaisesTimeout(), NoneArgs())
    assert await run_one(p, ctx(), 60, 16_000) == "error: raises_timeout failed (TimeoutError)"


async def test_a_failing_approval_policy_answers_that_call_only() -> None:
    registry = ToolRegistry([PolicyFails(), Slowish()])
    calls = [ToolCall("a", "policy_fails", {}), ToolCall("b", "slowish", {})]
    planned = await plan(calls, registry, {"policy_fails", "slowish"}, set(), Hooks(), HOOK_CTX)
    assert planned[0].answer == "error: not run (RuntimeError)"
    assert planned[1].answer is None and not planned[1].ask


async def test_a_body_still_arriving_when_the_time_is_up_shows_what_came() -> None:
    """The whole call's time limit fired first (it started earlier than the read
    timeout of the same length): what had arrived was lost, the call an error."""
    release = asyncio.Event()

    async def page(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: text/plain\r\n\r\n"
            b"partial body"
        )
        await writer.drain()
        await release.wait()  # nothing more arrives
        writer.close()

    server = await asyncio.start_server(page, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    c = ctx(http_tool_allowed_hosts="127.0.0.1", http_tool_timeout_secs=1)
    tool = HttpRequest()
    try:
        p = Planned(ToolCall("c1", "http_request", {}), tool, HttpArgs(url=url))
        out = await run_one(p, c, 60, 16_000)
    finally:
        release.set()
        await tool.shutdown()
        server.close()
    assert "partial body" in out, out
    assert "time limit of 1 s ran out" in out, out
