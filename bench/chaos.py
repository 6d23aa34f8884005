"""The ``chaos`` bench scenario: the fault scenarios of tests/faults/, with figures.

``await run(long=True)`` runs each scenario at its long size (the figures quoted in
docs/reliability.md); ``long=False`` runs the CI sizes.  Every scenario runs on
its own embedded Valkey (a temporary data dir), real subprocesses and fakes on
127.0.0.1 only.  The result is a dict ``{"scenarios": {name: figures}, ...}``;
a scenario that crashed reports ``{"error": ...}`` instead of stopping the rest.

Standalone: ``python -m bench.chaos [--long] [--only worker_kill,...]`` prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "worker_kill": {
        "short": {"rate": 20, "duration": 8, "kill_every": 2.5, "chats": 40},
        "long": {"rate": 50, "duration": 60, "kill_every": 5, "chats": 100},
    },
    "redis_restart": {
        "short": {"rate": 10, "duration": 8, "kill_at": 3, "down_for": 1.5, "chats": 10},
        "long": {
            "rate": 30,
            "duration": 60,
            "kill_at": 10,
            "down_for": 3,
            "restarts": 3,
            "chats": 50,
        },
    },
    "llm_storm": {
        "short": {"chats": 4, "per_chat": 3},
        "long": {"chats": 10, "per_chat": 20},
    },
    "sigterm_finish": {
        "short": {"chats": 6, "llm_latency": 1.5, "grace": 10},
        "long": {"chats": 20, "llm_latency": 3.0, "grace": 10},
    },
    "sigterm_hand_back": {
        "short": {"chats": 6, "llm_latency": 4.0, "grace": 0.5},
        "long": {"chats": 20, "llm_latency": 6.0, "grace": 1.0},
    },
    "crash_recovery": {
        "short": {"chats": 20, "llm_latency": 2.0},
        "long": {"chats": 200, "llm_latency": 2.0},
    },
}

COMMANDS = {
    "worker_kill": "PARLEY_LONG=1 .venv/bin/pytest tests/faults/test_worker_kill.py -m slow",
    "redis_restart": "PARLEY_LONG=1 .venv/bin/pytest tests/faults/test_redis_restart.py -m slow",
    "llm_storm": "PARLEY_LONG=1 .venv/bin/pytest tests/faults/test_llm_storm.py -m slow",
    "sigterm_finish": ".venv/bin/pytest tests/faults/test_sigterm.py",
    "sigterm_hand_back": ".venv/bin/pytest tests/faults/test_sigterm.py",
    "crash_recovery": ".venv/bin/pytest tests/faults/test_crash_recovery.py",
}


async def _one(name: str, params: dict[str, Any]) -> dict[str, Any]:
    from agent_core.store.embedded import EmbeddedValkey
    from tests.faults import scenarios

    work = Path(tempfile.mkdtemp(prefix=f"parley-chaos-{name}-"))
    if name == "redis_restart":
        return await scenarios.redis_restart(work, **params)
    server = EmbeddedValkey(Path(tempfile.mkdtemp(prefix="parley-chaos-valkey-")))
    await server.start()
    try:
        if name == "worker_kill":
            return await scenarios.worker_kill(server.url, work, **params)
        if name == "llm_storm":
            return await scenarios.llm_storm(server.url, work, **params)
        if name == "crash_recovery":
            return await scenarios.crash_recovery(server.url, work, **params)
        if name.startswith("sigterm"):
            return await scenarios.sigterm_mid_turn(server.url, work, **params)
        raise ValueError(f"unknown chaos scenario {name!r}")
    finally:
        await server.stop()


async def run(long: bool, only: list[str] | None = None) -> dict[str, Any]:
    """Run the chaos scenarios; figures per scenario (see module doc)."""
    size = "long" if long else "short"
    out: dict[str, Any] = {
        "bench": "chaos",
        "size": size,
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "scenarios": {},
    }
    for name, sizes in SIZES.items():
        if only and name not in only:
            continue
        t0 = time.monotonic()
        try:
            fig = await _one(name, dict(sizes[size]))
        except Exception as exc:
            fig = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        fig["wall_s"] = round(time.monotonic() - t0, 1)
        fig["rerun"] = COMMANDS[name]
        out["scenarios"][name] = fig
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="Parley chaos scenarios")
    ap.add_argument("--long", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--out", default="", help="also write the JSON here")
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s] or None
    result = asyncio.run(run(args.long, only))
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
