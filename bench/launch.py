"""Run ``parley`` (bots.cli) with bench-only instrumentation; never used in production.

    python -m bench.launch run web

Environment knobs (all optional):

* ``BENCH_RTT_FILE``: count Redis round trips (every ``send_packed_command``
  on a redis-py asyncio connection: one per command, one per pipeline, plus
  the SCRIPT EXISTS redis-py sends before a pipeline holding scripts; and
  every round trip on the shared connection, ``agent_core/store/multiplex.py``) and
  write the counters as JSON to ``<BENCH_RTT_FILE>.<pid>`` twice a second.
* ``BENCH_STAGES_FILE``: note when each turn passes the stages of its path
  (``bench/stages.py``) in ``<BENCH_STAGES_FILE>.<pid>``.
* ``BENCH_PROBE_FILE``: every 20 ms, the process's own CPU seconds, the garbage
  collections (generation, pause) since the last line and the seconds its main
  thread (the event loop) has spent runnable but waiting for a core (the second
  field of ``/proc/self/task/<tid>/schedstat``; 0 where absent), as JSON lines in
  ``<BENCH_PROBE_FILE>.<pid>`` (``bench/stages.py`` lines them up with slow
  turns: a process that used no CPU through a stall was not running).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from typing import Any


def _first_command(packed: Any) -> str:
    """The first command's name in a packed RESP request (for a breakdown)."""
    try:
        chunk = packed[0] if isinstance(packed, list | tuple) else packed
        if isinstance(chunk, memoryview):
            chunk = bytes(chunk)
        parts = bytes(chunk[:80]).split(b"\r\n")
        name = parts[2].decode().upper()
        if name == "SCRIPT":
            name += " " + parts[4].decode().upper()
        multi = isinstance(packed, list | tuple) and len(packed) > 1
        count = int(parts[0][1:]) if parts[0][:1] == b"*" else 0
        return name + ("+pipeline" if multi or (count and len(parts) > count * 2 + 2) else "")
    except Exception:
        return "?"


def _patch_rtt(path: str) -> None:
    from redis.asyncio.connection import AbstractConnection

    counts: Counter[str] = Counter()
    original = AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        counts["total"] += 1
        counts[_first_command(command)] += 1
        await original(self, command, check_health)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]

    from agent_core.store.multiplex import Multiplexer

    shared = Multiplexer.roundtrip

    async def counted_shared(self: Multiplexer, commands: Any) -> list[Any]:
        name = commands[0][0]
        name = (name.decode() if isinstance(name, bytes) else str(name)).upper()
        counts["total"] += 1
        counts[name + ("+pipeline" if len(commands) > 1 else "")] += 1
        return await shared(self, commands)

    Multiplexer.roundtrip = counted_shared  # type: ignore[method-assign]
    out = f"{path}.{os.getpid()}"

    def dump() -> None:
        while True:
            tmp = out + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(dict(counts), fh)
            os.replace(tmp, out)
            time.sleep(0.5)

    threading.Thread(target=dump, daemon=True, name="bench-rtt").start()


def schedstat_wait(path: str) -> float:
    """Seconds a thread has spent runnable but waiting for a core (the second field
    of its ``/proc/.../schedstat``); 0 where the file is absent."""
    try:
        with open(path) as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _probe(path: str) -> None:
    import gc

    collections: list[tuple[int, float]] = []
    started: list[float] = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            collections.append((info["generation"], time.perf_counter() - started[0]))

    gc.callbacks.append(on_gc)
    out = f"{path}.{os.getpid()}"
    sched = f"/proc/self/task/{threading.get_native_id()}/schedstat"

    def sample() -> None:
        with open(out, "a") as fh:
            while True:
                time.sleep(0.02)
                taken, collections[:] = collections[:], []
                line = [time.monotonic(), time.process_time(), taken, schedstat_wait(sched)]
                fh.write(json.dumps(line) + "\n")
                fh.flush()

    threading.Thread(target=sample, daemon=True, name="bench-probe").start()


def main() -> None:
    import sys

    if os.environ.get("BENCH_RTT_FILE"):
        _patch_rtt(os.environ["BENCH_RTT_FILE"])
    if os.environ.get("BENCH_PROBE_FILE"):
        _probe(os.environ["BENCH_PROBE_FILE"])
    if os.environ.get("BENCH_STAGES_FILE"):
        from bench.stages import install

        install(os.environ["BENCH_STAGES_FILE"])
    from bots.cli import main as cli_main

    cli_main(sys.argv[1:])


if __name__ == "__main__":
    main()
