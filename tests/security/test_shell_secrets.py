"""``run_shell`` cannot read Parley's secrets through /proc (docs/tools.md: "never
Parley's keys, tokens or REDIS_URL").

The command's own environment was minimal, but ``tr '\\0' '\\n' </proc/$PPID/environ``
printed Parley's whole environment: a command runs as Parley's user, and a process
may read the /proc files of another of its user's processes unless that one is
non-dumpable.  At start the runtime makes itself non-dumpable (``prctl``).

Root reads /proc regardless, so the check runs the real shell tool in a child
process that drops to an unprivileged uid first (nobody, 65534) when the tests run
as root — and makes itself dumpable again, as a process a normal user starts is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent_core.tools import shell

ROOT = Path(__file__).parents[2]
TOKEN = "123456:SECRETtokenFORtheTEST0123456789abc"
NOBODY = 65534

CHILD = textwrap.dedent(
    """
    import asyncio, asyncio.subprocess, ctypes, os, subprocess, sys
    from types import SimpleNamespace
    # everything imported while the code (under root's home, say) is still readable
    from agent_core.tools.shell import RunShell, ShellArgs
    from bots.runtime import protect_secrets
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    # a process started by an ordinary user is dumpable (changing uid just now was
    # not what Parley does): start from that state
    assert ctypes.CDLL(None).prctl(4, 1, 0, 0, 0) == 0
    if sys.argv[1] == "protect":
        protect_secrets(True)  # what the runtime does at start
    settings = SimpleNamespace(
        shell_tool_workdir=sys.argv[3], shell_tool_env="", shell_tool_timeout_secs=10,
        parley_data_dir=sys.argv[3],
    )
    ctx = SimpleNamespace(settings=settings)
    command = (
        "echo uid=$(id -u); tr '\\\\0' '\\\\n' < /proc/$PPID/environ; echo rc=$?; "
        "head -c 300 /proc/$PPID/mem >/dev/null; echo mem=$?"
    )
    print(asyncio.run(RunShell().run(ShellArgs(command=command), ctx)))
    """
)


def _can_run_unprivileged() -> str:
    if not sys.platform.startswith("linux"):
        return "prctl(PR_SET_DUMPABLE) is Linux only"
    if os.geteuid() != 0:
        return ""
    # nobody must be able to read the code and the interpreter
    probe = subprocess.run(
        [sys.executable, "-c", "import os, ctypes; os.setgid(65534); os.setuid(65534)"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=60,
    )
    if probe.returncode != 0:
        return (
            "running as root, and uid 65534 cannot import the code: " + probe.stderr.decode()[-200:]
        )
    return ""


def _run(mode: str) -> str:
    workdir = tempfile.mkdtemp(prefix="parley-shell-secrets-")  # in /tmp: nobody may enter
    os.chmod(workdir, 0o777)
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, mode, TOKEN, workdir],
            cwd=workdir,
            env={  # Parley's environment as the process started with it
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "PYTHONPATH": str(ROOT),
                "TELEGRAM_BOT_TOKEN": TOKEN,
                "REDIS_URL": f"redis://:{TOKEN}@localhost:6379",
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def unprivileged() -> None:
    why = _can_run_unprivileged()
    if why:
        pytest.skip(why)


def test_a_shell_command_cannot_read_parleys_environment(
    unprivileged: None, tmp_path: Path
) -> None:
    out = _run("protect")
    assert "uid=0" not in out  # the command really ran unprivileged
    assert "exit code 0" in out, out
    assert TOKEN not in out, out
    assert "rc=0" not in out and "Permission denied" in out, out
    assert "mem=0" not in out


def test_without_the_protection_the_same_command_reads_it(
    unprivileged: None, tmp_path: Path
) -> None:
    """The check above can see a leak: unprotected, the token is printed."""
    out = _run("bare")
    assert TOKEN in out and "rc=0" in out, out


def test_make_undumpable_sets_the_flag(unprivileged: None) -> None:
    code = (
        "import ctypes; from agent_core.tools.shell import make_undumpable; "
        "assert make_undumpable(); print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "0", out.stderr  # PR_GET_DUMPABLE


async def test_the_runtime_protects_itself_before_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import bots.runtime as runtime

    class Called(Exception):
        pass

    def first(shell_enabled: bool) -> None:
        raise Called(shell_enabled)

    monkeypatch.setattr(runtime, "protect_secrets", first)
    rt = runtime.Runtime.__new__(runtime.Runtime)
    rt.settings = SimpleNamespace(core=SimpleNamespace(enable_shell_tool=True))  # type: ignore[assignment]
    with pytest.raises(Called):
        await rt._start()  # before Redis, channels, the worker: nothing else touched


async def test_the_default_workdir_is_an_empty_private_dir_under_the_data_dir(
    tmp_path: Path,
) -> None:
    (tmp_path / ".env").write_text("TELEGRAM_BOT_TOKEN=" + TOKEN)
    data = tmp_path / ".parley"
    settings: Any = SimpleNamespace(
        shell_tool_workdir="", shell_tool_env="", shell_tool_timeout_secs=10, parley_data_dir=data
    )
    old = os.getcwd()
    os.chdir(tmp_path)  # Parley's working directory, where its .env sits
    try:
        out = await shell.RunShell().run(
            shell.ShellArgs(command="pwd; ls -A; cat .env"),
            SimpleNamespace(settings=settings),  # type: ignore[arg-type]
        )
    finally:
        os.chdir(old)
    workdir = data.resolve() / "shell"
    assert out.splitlines()[1] == str(workdir), out
    assert TOKEN not in out
    assert (workdir.stat().st_mode & 0o777) == 0o700
