"""The process a PDF is read in (``python -m agent_core.agent.pdf_child``).

A PDF from a stranger can be built to make a parser work for minutes and take
gigabytes (a few KB of deflated drawing operators on one page), and no parser
can be stopped from the outside while it runs in a thread.  So each PDF is read
here, in a short-lived process of its own: the worker kills it at the message's
deadline, and it caps its own memory (``RLIMIT_AS``) and CPU time
(``RLIMIT_CPU``: it ends even if the worker that started it died).

Protocol: the PDF's bytes on stdin; one JSON argument
``{"tokens", "secs", "read_secs", "max_pages", "memory"}``; the result as JSON on
stdout: ``{"text", "pages", "read", "starts", "stopped"}`` or ``{"error"}``.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time


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
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(what, (value, value))


def main() -> None:
    import logging
    import warnings

    # pypdf's warnings about a damaged file, per page, would pile up unread on stderr
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    from agent_core.agent import pdfs  # pypdf loaded before the memory cap

    args = json.loads(sys.argv[1])
    _limit(int(args["memory"]), float(args["secs"]))
    data = sys.stdin.buffer.read()
    got = pdfs.read(
        data,
        int(args["tokens"]),
        time.monotonic() + float(args["secs"]),
        read_secs=float(args["read_secs"]),
        max_pages=int(args["max_pages"]),
    )
    out: dict[str, object]
    if isinstance(got, str):
        out = {"error": got}
    else:
        out = {
            "text": got.text,
            "pages": got.pages,
            "read": got.read,
            "starts": list(got.starts),
            "stopped": got.stopped,
        }
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
