"""The process a PDF, Word, Excel or PowerPoint file is read in
(``python -m agent_core.agent.doc_child``).

A document from a stranger can be built to make a parser work for minutes and take
gigabytes, and no parser can be stopped from the outside while it runs in a thread.
So each document is read here, in a short-lived process of its own
(:mod:`~agent_core.agent.doc_process` starts it): the worker kills it a second after
its seconds of reading (never past the message's deadline), and it caps its own memory
(``RLIMIT_AS``) and CPU time (``RLIMIT_CPU``, its seconds of reading plus 2: it ends
even if the worker that started it died).

Protocol: the file's bytes on stdin; one JSON argument ``{"kind", "tokens",
"deadline", "read_secs", "memory", ...}`` with the kind's own limits (a PDF:
``"max_pages"``; a Word, Excel or PowerPoint file: the zip and sheet caps of
:mod:`~agent_core.agent.office`), ``deadline`` being when the worker kills it (a
:func:`time.time` time: the one clock both share, read first thing here); the result
as JSON on stdout: ``{"error"}``, or for a PDF ``{"text", "pages", "read", "starts",
"stopped"}``, for a Word, Excel or PowerPoint file ``{"text", "sheets", "starts",
"stopped"}`` (``sheets``: a presentation's slides).
Out of memory (a MemoryError), it exits with :data:`MEMORY_EXIT`.  Only the library
the file's kind needs is imported, before the memory cap.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
from typing import Any

MEMORY_EXIT = 75  # the exit status when the memory cap was reached (a MemoryError)


def _limit(memory: int, secs: float) -> None:
    try:
        import resource
    except ImportError:  # not on this platform: the worker's deadline still applies
        return
    limits = (
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_CPU, math.ceil(secs) + 2),
        (resource.RLIMIT_CORE, 0),  # SIGXCPU would dump core
    )
    for what, value in limits:
        # the CPU's hard limit a second above the soft one: SIGXCPU (told apart as
        # "slow") rather than SIGKILL (a failure) when the soft one is reached
        hard = value + 1 if what == resource.RLIMIT_CPU else value
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(what, (value, hard))


def _pdf(args: dict[str, Any], data: bytes, give_up_at: float) -> dict[str, object]:
    from agent_core.agent import pdfs

    got = pdfs.read(
        data,
        int(args["tokens"]),
        give_up_at,
        read_secs=float(args["read_secs"]),
        max_pages=int(args["max_pages"]),
    )
    if isinstance(got, str):
        return {"error": got}
    return {
        "text": got.text,
        "pages": got.pages,
        "read": got.read,
        "starts": list(got.starts),
        "stopped": got.stopped,
    }


def _office(args: dict[str, Any], data: bytes, give_up_at: float) -> dict[str, object]:
    from agent_core.agent import office_read

    limits = office_read.Limits(
        read_secs=float(args["read_secs"]),
        max_unzipped=int(args["max_unzipped"]),
        max_members=int(args["max_members"]),
        max_part=int(args["max_part"]),
        max_rows=int(args["max_rows"]),
        max_columns=int(args["max_columns"]),
    )
    got = office_read.read(args["kind"], data, int(args["tokens"]), give_up_at, limits)
    if isinstance(got, str):
        return {"error": got}
    return {
        "text": got.text,
        "sheets": got.sheets,
        "starts": [list(s) for s in got.starts],
        "stopped": got.stopped,
    }


def main() -> None:
    # A platform's restart SIGTERMs every process (Heroku: the whole dyno) while the
    # worker lets the turn in hand finish: the reading goes on.  The worker kills this
    # process itself (SIGKILL, its group) at its deadline or when the turn is
    # cancelled, and RLIMIT_CPU ends it should the worker be gone.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # the worker's deadline, in this process's monotonic clock, before anything else
    wall, now = time.time(), time.monotonic()
    try:
        _main(wall, now)
    except MemoryError:
        os._exit(MEMORY_EXIT)


def _main(wall: float, now: float) -> None:
    import logging
    import warnings

    # the parsers' warnings about a damaged file would pile up unread on stderr
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    args = json.loads(sys.argv[1])
    kind = args.get("kind", "pdf")
    give_up_at = now + float(args["deadline"]) - wall
    # only the parser this kind needs, loaded before the memory cap
    if kind == "pdf":
        from agent_core.agent import pdfs  # noqa: F401
    else:
        if kind == "docx":
            import docx  # noqa: F401
        elif kind == "pptx":
            import pptx  # noqa: F401

            from agent_core.agent import slides_read  # noqa: F401
        else:
            import openpyxl  # noqa: F401
        from agent_core.agent import office_read  # noqa: F401
    _limit(int(args["memory"]), float(args["read_secs"]))
    data = sys.stdin.buffer.read()
    out = _pdf(args, data, give_up_at) if kind == "pdf" else _office(args, data, give_up_at)
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
