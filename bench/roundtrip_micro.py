"""CPU per Redis round trip: a pooled connection against the shared one.

    python -m bench.roundtrip_micro [--loop uvloop|asyncio] [--n 6000]

Starts an embedded Valkey in a temporary directory and times ``wire.roundtrip``
of three commands (SET, GET, HGETALL) on the ``blocking`` client (redis-py's
pool, the path before hot spot 18) and on the general client (the shared
connection, ``agent_core/store/multiplex.py``), one caller at a time and 50 at
once.  Prints this process's CPU per round trip and round trips per second,
each measured twice after a warm-up.  Not a ``parley bench`` scenario: no
target, a figure for bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from agent_core.store import wire
from agent_core.store.client import make_clients
from agent_core.store.embedded import EmbeddedValkey

Send = Callable[[Sequence[Sequence[Any]]], Awaitable[list[Any]]]


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


async def _measure(send: Send, callers: int, n: int) -> tuple[float, float]:
    async def one(k: int) -> None:
        for _ in range(n // callers):
            await send([("SET", f"k{k}", "v"), ("GET", f"k{k}"), ("HGETALL", "none")])

    await asyncio.gather(*(one(k) for k in range(callers)))  # warm-up
    c0, t0 = _cpu(), time.perf_counter()
    await asyncio.gather(*(one(k) for k in range(callers)))
    c1, t1 = _cpu(), time.perf_counter()
    return 1e6 * (c1 - c0) / n, n / (t1 - t0)


async def _main(n: int) -> None:
    server = EmbeddedValkey(Path(tempfile.mkdtemp(prefix="parley-rt-")))
    await server.start()
    clients = make_clients(server.url)
    paths: dict[str, Send] = {
        "pooled": lambda c: wire.roundtrip(clients.blocking, c),
        "shared": lambda c: wire.roundtrip(clients.redis, c),
    }
    try:
        for callers in (1, 50):
            for _ in range(2):
                for name, send in paths.items():
                    us, rate = await _measure(send, callers, n)
                    print(f"{name:7} {callers:3} at once: {us:6.1f} µs CPU, {rate:7.0f}/s")
    finally:
        await clients.close()
        await server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    ap.add_argument("--n", type=int, default=6000)
    args = ap.parse_args()
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(_main(args.n))
    else:
        asyncio.run(_main(args.n))


if __name__ == "__main__":
    main()
