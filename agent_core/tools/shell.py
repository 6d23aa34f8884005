"""``run_shell``: off unless ENABLE_SHELL_TOOL=true; every call needs approval."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from pydantic import BaseModel, Field

from agent_core.tools.base import Approval, Tool, ToolContext, ToolError

MAX_CAPTURE = 256_000  # bytes read from the process; the LLM sees less (capped later)


async def _read_capped(stream: asyncio.StreamReader) -> bytes:
    buf = bytearray()
    while chunk := await stream.read(65_536):
        if len(buf) < MAX_CAPTURE:
            buf += chunk[: MAX_CAPTURE - len(buf)]
    return bytes(buf)


class ShellArgs(BaseModel):
    command: str = Field(description="a shell command line", min_length=1, max_length=4000)


class RunShell(Tool[ShellArgs]):
    name = "run_shell"
    description = (
        "Run a shell command on the bot's host and return its exit code and output. "
        "Every call is shown to the user for approval first."
    )
    args_model = ShellArgs
    approval = Approval.ALWAYS
    external = True

    async def run(self, args: ShellArgs, ctx: ToolContext) -> str:
        s = ctx.settings
        cwd = s.shell_tool_workdir or None
        try:
            proc = await asyncio.create_subprocess_shell(
                args.command,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                cwd=cwd,
                start_new_session=True,  # its own process group: a timeout kills it all
            )
        except OSError as exc:
            raise ToolError(f"could not start the command: {exc.strerror or exc}") from None
        assert proc.stdout is not None
        try:
            out, code = await asyncio.wait_for(
                asyncio.gather(_read_capped(proc.stdout), proc.wait()), s.shell_tool_timeout_secs
            )
        except (TimeoutError, asyncio.CancelledError) as exc:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 2)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise ToolError(
                f"the command did not finish within {s.shell_tool_timeout_secs:g} s and was killed"
            ) from None
        text = out.decode("utf-8", errors="replace")
        return f"exit code {code}\n{text}"
