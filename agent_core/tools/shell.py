"""``run_shell``: off unless ENABLE_SHELL_TOOL=true; every call needs approval
("Always" approves one call only).  The command sees a minimal environment, not
Parley's keys and tokens.  A timeout kills its process group and every process still
below it (one that left the group with ``setsid`` too); a daemon that detached
completely (double fork, its parent gone) is not tracked."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from agent_core.tools.base import Approval, Tool, ToolContext, ToolError

if TYPE_CHECKING:
    from agent_core.settings import CoreSettings

log = logging.getLogger(__name__)

MAX_CAPTURE = 256_000  # bytes read from the process; the LLM sees less (capped later)


async def _read_capped(stream: asyncio.StreamReader, buf: bytearray) -> None:
    while chunk := await stream.read(65_536):
        if len(buf) < MAX_CAPTURE:
            buf += chunk[: MAX_CAPTURE - len(buf)]


# After the command exits: how long its output may take to drain (a process that
# left its group and keeps the pipe open is not waited for beyond this).
DRAIN_SECS = 2.0


async def _exited(proc: asyncio.subprocess.Process) -> int:
    """The command's exit code, as soon as it exits.  ``proc.wait()`` also waits for
    its output pipe to close, which a job it left in the background keeps open."""
    while (code := proc.returncode) is None:
        await asyncio.sleep(0.05)
    return code


# What a command needs to behave normally; nothing of Parley's own configuration
# (keys, tokens, REDIS_URL): the output goes back to the model.
BASE_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "TERM",
)


def shell_env(extra: str = "") -> dict[str, str]:
    """The command's environment: :data:`BASE_ENV` plus the names in
    SHELL_TOOL_ENV (comma-separated), taken from Parley's environment."""
    names = [*BASE_ENV, *(n.strip() for n in extra.split(",") if n.strip())]
    return {n: os.environ[n] for n in names if n in os.environ}


PR_SET_DUMPABLE = 4  # <linux/prctl.h>
WORKDIR_NAME = "shell"  # SHELL_TOOL_WORKDIR's default: PARLEY_DATA_DIR/shell


def make_undumpable() -> bool:
    """Make this process non-dumpable (Linux ``prctl(PR_SET_DUMPABLE, 0)``): its
    ``/proc/<pid>/environ``, ``mem``, ``fd`` … then belong to root, so a command run
    by ``run_shell`` (same user, a child of this process) cannot read Parley's
    tokens and keys there, and cannot attach a debugger to it.  No help when Parley
    runs as root (root reads them anyway): run it as another user or in a container.
    Called once at start, before any tool can run; True if it took effect.  A no-op
    (False) off Linux or if the call fails.  Commands are unaffected (an ``exec``
    makes a process dumpable again)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def default_workdir(data_dir: Path) -> Path:
    """SHELL_TOOL_WORKDIR when unset: an empty directory of its own under the data
    dir (not Parley's working directory, where its ``.env`` may sit), private to
    Parley's user (0700), made on first use."""
    path = data_dir.expanduser().resolve() / WORKDIR_NAME
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


class ShellArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown key is refused, not ignored

    command: str = Field(description="a shell command line", min_length=1, max_length=4000)


class RunShell(Tool[ShellArgs]):
    name = "run_shell"
    description = (
        "Run a shell command on the bot's host and return its exit code and output. "
        "Every call is shown to the user for approval first."
    )
    args_model = ShellArgs
    approval = Approval.ALWAYS
    allow_always = False  # a shell is never approved for the rest of a conversation
    external = True

    def time_limit(self, settings: CoreSettings) -> float:
        # The command's own limit, plus time to kill its group and return its output.
        return settings.shell_tool_timeout_secs + 5.0

    async def run(self, args: ShellArgs, ctx: ToolContext) -> str:
        s = ctx.settings
        try:
            cwd = s.shell_tool_workdir or str(default_workdir(s.parley_data_dir))
        except OSError as exc:
            raise ToolError(f"could not create the shell's working directory: {exc}") from None
        try:
            proc = await asyncio.create_subprocess_shell(
                args.command,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                cwd=cwd,
                env=shell_env(s.shell_tool_env),
                start_new_session=True,  # its own process group: a timeout kills it all
            )
        except OSError as exc:
            if not await asyncio.to_thread(os.path.isdir, cwd):
                # not the command's fault: the model must not go on rewriting it
                log.warning("run_shell: SHELL_TOOL_WORKDIR %s is not a directory", cwd)
                raise ToolError(
                    f"could not start the command: its working directory {cwd} "
                    "(SHELL_TOOL_WORKDIR) does not exist or is not a directory; "
                    "the operator must fix the setting"
                ) from None
            raise ToolError(f"could not start the command: {exc.strerror or exc}") from None
        assert proc.stdout is not None
        buf = bytearray()
        reader = asyncio.create_task(_read_capped(proc.stdout, buf))
        try:
            code = await asyncio.wait_for(_exited(proc), s.shell_tool_timeout_secs)
            # Done. What it left running in the background (`server &`) is still in
            # its process group and holds the output pipe open: it is stopped, as
            # at a timeout, and the output so far is the result.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), DRAIN_SECS)
        except (TimeoutError, asyncio.CancelledError) as exc:
            escaped = _descendants(proc.pid)  # read before the tree falls apart
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            for pid in escaped:  # those that left the group (setsid) are still its children
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 2)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise ToolError(
                f"the command did not finish within {s.shell_tool_timeout_secs:g} s and was killed"
            ) from None
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        text = bytes(buf).decode("utf-8", errors="replace")
        return f"exit code {code}\n{text}"
