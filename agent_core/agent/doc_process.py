"""The short-lived process a PDF, Word or Excel file is read in, from the worker's side.

A document from a stranger can be built to make any parser work for minutes and take
gigabytes (a few KB of deflated PDF drawing operators; a zip that unpacks to
gigabytes; a Word table whose merged cells make python-docx quadratic), and a parser
running in a thread cannot be stopped; a process can.  So each document is read in
``python -m agent_core.agent.doc_child``, which :func:`run` starts:

* it is killed at the message's deadline, and caps its own memory (``RLIMIT_AS``) and
  CPU time (``RLIMIT_CPU``, so it ends even if the worker that started it died);
* the worker's memory and event loop are untouched by what happens in it; starting it
  costs ~0.3 s of CPU per document, which documents, rarer than messages, can afford;
* one at a time per worker (per event loop: tests run several), PDFs and Office files
  alike: a document waits for the one before it, within its message's deadline.

Each kind's own limits (pages, rows, seconds of reading, memory) travel in the child's
JSON argument, read from its module's constants when the reading starts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import weakref
from typing import Any

log = logging.getLogger(__name__)

MARGIN_SECS = 1.0  # reading stops this long before the message's deadline
TOO_LATE = "not read in time (slow to read, or the bot was busy reading other documents)"

# one document at a time per worker process (a lock per event loop: tests run several)
_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


async def run(
    kind: str, data: bytes, args: dict[str, object], give_up_at: float, *, too_big: str
) -> dict[str, Any]:
    """What the reading process of ``kind`` ("pdf", "docx", "xlsx") answered for
    ``data``: its JSON object, or ``{"error": reason}`` when it was not read in time
    (:data:`TOO_LATE`: ``give_up_at``, a :func:`time.monotonic` time, came first,
    waiting for the document before it included) or the process died (``too_big``:
    most often its memory cap)."""
    loop = asyncio.get_running_loop()
    turn = _TURNS.setdefault(loop, asyncio.Lock())
    try:
        async with asyncio.timeout(max(0.0, give_up_at - time.monotonic())):
            await turn.acquire()
    except TimeoutError:
        return {"error": TOO_LATE}
    try:
        return await _run(kind, data, args, give_up_at, too_big)
    finally:
        turn.release()


async def _run(
    kind: str, data: bytes, args: dict[str, object], give_up_at: float, too_big: str
) -> dict[str, Any]:
    secs = give_up_at - time.monotonic()
    if secs <= MARGIN_SECS:
        return {"error": TOO_LATE}
    argument = json.dumps({**args, "kind": kind, "secs": secs})
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agent_core.agent.doc_child", argument),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(secs):
            out, err = await proc.communicate(data)
    except TimeoutError:
        log.warning("a %s was still being read at its deadline: its process is stopped", kind)
        return {"error": TOO_LATE}
    finally:
        if proc.returncode is None:  # the deadline, or this turn cancelled
            proc.kill()
            await asyncio.shield(proc.wait())
    try:
        got = json.loads(out)
    except ValueError:
        got = None
    if proc.returncode != 0 or not isinstance(got, dict):
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        log.warning(
            "the %s reading process failed (exit %s): %s", kind, proc.returncode, tail[0][:300]
        )
        return {"error": too_big}
    if "error" in got:
        return {"error": str(got["error"])}
    return got
