"""The short-lived process a PDF, Word, Excel or PowerPoint file is read in, from the
worker's side.

A document from a stranger can be built to make any parser work for minutes and take
gigabytes (a few KB of deflated PDF drawing operators; a zip that unpacks to
gigabytes; a workbook of millions of shared strings that openpyxl takes half a minute
to open), and a parser running in a thread cannot be stopped; a process can.  So each
document is read in ``python -m agent_core.agent.doc_child``, which :func:`run`
starts:

* it is killed (its whole process group) at :data:`KILL_AFTER_SECS` past the kind's
  seconds of reading from its start, or at the message's deadline if that comes first,
  and caps its own memory (``RLIMIT_AS``) and CPU time (``RLIMIT_CPU``: its seconds of
  reading plus 2, so it ends even if the worker that started it died);
* it gets a minimal environment (:data:`CHILD_ENV`: no API keys or tokens), and the
  worker reads at most :data:`MAX_OUT_BYTES` of its answer and keeps at most
  :data:`MAX_ERR_BYTES` of its stderr;
* the worker's memory and event loop are untouched by what happens in it; starting it
  costs ~0.3 s of CPU per document, which documents, rarer than messages, can afford;
* at most :class:`Readers` ``.slots`` (``DOCUMENT_READERS``, default :data:`SLOTS`)
  at a time per worker (per event loop: tests run several), PDFs and Office files
  alike, and at most one per conversation (``queue``): a document waits for the one
  before it, within its message's deadline, and one conversation's slow documents
  leave the other slots to the rest (with one slot, they hold it up to its 16 s).

Each kind's own limits (pages, rows, seconds of reading, memory) travel in the child's
JSON argument, read from its module's constants when the reading starts, with the
``deadline`` it is killed at as a :func:`time.time` (wall clock) time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import agent_core
from agent_core.agent.doc_child import MEMORY_EXIT

log = logging.getLogger(__name__)

MARGIN_SECS = 1.0  # reading stops this long before the process is killed
KILL_AFTER_SECS = 1.0  # the process is killed this long after its seconds of reading
SLOTS = 2  # reading processes at once per worker (DOCUMENT_READERS)
MAX_OUT_BYTES = 8_000_000  # the answer: the text read (an allowance's worth) as JSON
MAX_ERR_BYTES = 64 * 1024  # the end of the process's stderr kept for the log
# PYTHONHOME / LD_LIBRARY_PATH: a relocated Python (Heroku's buildpack) finds its
# standard library and libpython through them
CHILD_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONHOME", "LD_LIBRARY_PATH")
TOO_LATE = "not read in time (slow to read, or the bot was busy reading other documents)"
FAILED = "could not be read (the reader failed)"


@dataclass(frozen=True, slots=True)
class Readers:
    """How many reading processes a worker runs at once, and the memory each may take
    (``DOCUMENT_READERS``, ``DOCUMENT_MEMORY_MB``): together they bound what reading
    documents adds to a worker's memory, which a small host (a 512 MB dyno) needs
    lower than the defaults."""

    slots: int
    memory_bytes: int


class _Limiter:
    """At most ``capacity`` holders; the capacity is whatever the last caller asked for
    (one setting per process in production; tests change it), and a change applies to
    everyone, those already waiting included."""

    def __init__(self) -> None:
        self.capacity = SLOTS
        self.held = 0
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def slot(self, capacity: int) -> AsyncIterator[None]:
        async with self._changed:
            if capacity != self.capacity:
                self.capacity = capacity
                self._changed.notify_all()
            await self._changed.wait_for(lambda: self.held < self.capacity)
            self.held += 1
        try:
            yield
        finally:
            async with self._changed:
                self.held -= 1
                self._changed.notify_all()


class Share:
    """The documents of one message, ``left`` to read: each, when its turn comes, may
    take its share of the message's time left (a slow one cannot leave the next with
    none)."""

    __slots__ = ("left",)

    def __init__(self, documents: int) -> None:
        self.left = documents

    def secs(self, give_up_at: float) -> float:
        return (give_up_at - time.monotonic()) / max(1, self.left)


# the reading slots of a worker, and each conversation's turn (per event loop: tests
# run several)
_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Limiter] = weakref.WeakKeyDictionary()
_QUEUES: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, weakref.WeakValueDictionary[Hashable, asyncio.Lock]
] = weakref.WeakKeyDictionary()
# where this agent_core was imported from: the child must import the same code (not
# needed when that is a site directory, which the child's Python finds by itself)
_ROOT = str(Path(agent_core.__file__).resolve().parent.parent)


def child_env() -> dict[str, str]:
    """The reading process's environment: :data:`CHILD_ENV` from the worker's, and
    ``PYTHONPATH`` leading to this very ``agent_core``."""
    env = {n: os.environ[n] for n in CHILD_ENV if n in os.environ}
    own = None if _ROOT in _site_dirs() else _ROOT
    env["PYTHONPATH"] = os.pathsep.join(p for p in (own, os.environ.get("PYTHONPATH")) if p)
    return env


def _site_dirs() -> set[str]:
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return {str(Path(d).resolve()) for d in dirs}


async def run(
    kind: str,
    data: bytes,
    args: dict[str, object],
    give_up_at: float,
    *,
    too_big: str,
    queue: Hashable = None,
    share: Share | None = None,
    readers: Readers | None = None,
) -> dict[str, Any]:
    """What the reading process of ``kind`` ("pdf", "docx", "xlsx", "pptx") answered for
    ``data``: its JSON object, or ``{"error": reason}`` when it was not read in time
    (:data:`TOO_LATE`: ``give_up_at``, a :func:`time.monotonic` time, came first,
    waiting for the documents before it included, or the process was killed after its
    ``args["read_secs"]`` or its ``share`` of the time left), it ran out of memory
    (``too_big``) or it failed (:data:`FAILED`).  Documents of one ``queue`` (a
    conversation; None: its own) are read one at a time; at most ``readers.slots``
    (default :data:`SLOTS`) of the worker's at once, each within ``readers.memory_bytes``
    (default: ``args["memory"]``, the kind's own)."""
    if readers is not None:
        args = {**args, "memory": readers.memory_bytes}
    slots = SLOTS if readers is None else readers.slots
    loop = asyncio.get_running_loop()
    gate = _SLOTS.setdefault(loop, _Limiter())
    queues = _QUEUES.setdefault(loop, weakref.WeakValueDictionary())
    mine = asyncio.Lock() if queue is None else queues.setdefault(queue, asyncio.Lock())
    try:
        async with asyncio.timeout(max(0.0, give_up_at - time.monotonic())):
            async with mine:
                secs = share.secs(give_up_at) if share is not None else math.inf
                async with gate.slot(slots):
                    return await _run(kind, data, args, give_up_at, too_big, secs)
    except TimeoutError:
        return {"error": TOO_LATE}


async def _run(
    kind: str, data: bytes, args: dict[str, object], give_up_at: float, too_big: str, share: float
) -> dict[str, Any]:
    now = time.monotonic()
    secs = min(cast(float, args["read_secs"]) + KILL_AFTER_SECS, share)
    kill_at = min(give_up_at, now + secs)
    if kill_at - now <= MARGIN_SECS:
        return {"error": TOO_LATE}
    argument = json.dumps({**args, "kind": kind, "deadline": time.time() + kill_at - now})
    try:
        proc = await asyncio.create_subprocess_exec(
            # -P: not the working directory first on its path (a stray agent_core/ there)
            *(sys.executable, "-P", "-m", "agent_core.agent.doc_child", argument),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=child_env(),
            cwd="/",
            start_new_session=True,  # its own process group, killed whole
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("could not start a %s reading process: %s", kind, exc)
        return {"error": FAILED}
    try:
        # the message's deadline (asyncio.timeout above) is never later than kill_at
        async with asyncio.timeout(kill_at - time.monotonic()):
            out, err = await _talk(proc, data)
    except TimeoutError:
        log.warning("a %s was still being read at its deadline: its process is stopped", kind)
        return {"error": TOO_LATE}
    finally:
        if proc.returncode is None:  # the deadline, or this turn cancelled
            _kill(proc.pid)
            await asyncio.shield(proc.wait())
    try:
        got = json.loads(out)
    except ValueError:
        got = None
    if proc.returncode == 0 and isinstance(got, dict):
        return {"error": str(got["error"])[:300]} if "error" in got else got
    tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
    log.warning("the %s reading process failed (exit %s): %s", kind, proc.returncode, tail[0][:300])
    if proc.returncode == MEMORY_EXIT:
        return {"error": too_big}
    if proc.returncode == -signal.SIGXCPU:  # its CPU time: slow, as at the deadline
        return {"error": TOO_LATE}
    return {"error": FAILED}


async def _talk(proc: asyncio.subprocess.Process, data: bytes) -> tuple[bytes, bytes]:
    """(its stdout, the end of its stderr) once the process has ended and its pipes
    are closed; anything it left running with its pipes open is killed then."""
    assert proc.stdin and proc.stdout and proc.stderr
    out = asyncio.ensure_future(_read(proc.stdout, MAX_OUT_BYTES))
    err = asyncio.ensure_future(_read(proc.stderr, MAX_ERR_BYTES))
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(data)
            await proc.stdin.drain()
            proc.stdin.close()
        exited_at = None
        # asyncio's wait() also waits for the pipes (uvloop's does not): the exit is
        # seen in returncode, the same on both
        while not (out.done() and err.done()):
            await asyncio.wait([out, err], timeout=0.1)
            if proc.returncode is not None:
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > 0.5:
                    # a process it started holds its pipes: its group, killed once (a
                    # group number freed since could be reused), then the pipes closed
                    _kill(proc.pid)
                    await asyncio.wait([out, err], timeout=0.5)
                    break
        return _done(out), _done(err)
    finally:
        out.cancel()
        err.cancel()


def _done(task: asyncio.Future[bytes]) -> bytes:
    return task.result() if task.done() and not task.cancelled() else b""


async def _read(stream: asyncio.StreamReader, cap: int) -> bytes:
    """All of ``stream`` when it holds at most ``cap`` bytes; else its last ``cap``
    bytes, the rest read and dropped (so the process never blocks on a full pipe)."""
    kept = b""
    while chunk := await stream.read(65536):
        kept = (kept + chunk)[-cap - 1 :]
    return kept


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
