"""run_shell returns when the command exits (what it left in the background is
stopped), and http_request's timeout bounds the whole request, not each read."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from agent_core.events import ThreadKey
from agent_core.settings import CoreSettings
from agent_core.tools.base import ToolContext, ToolError
from agent_core.tools.http_request import HttpArgs, HttpRequest
from agent_core.tools.shell import RunShell, ShellArgs


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
        with pytest.raises(ToolError, match="timed out after 1 s"):
            await tool.run(
                HttpArgs(url=f"http://127.0.0.1:{port}/"),
                ctx(http_tool_timeout_secs=1, http_tool_allowed_hosts="127.0.0.1"),
            )
    finally:
        await tool.shutdown()
        server.close()
