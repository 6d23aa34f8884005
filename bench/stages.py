"""The `stages` scenario: where a plain Telegram turn's time goes, stage by stage.

Parley alone (web + worker) at ``--rate`` turns/s for ``--duration`` s.  Inside the
Parley processes (``bench.launch`` with ``BENCH_STAGES_FILE``) a few methods on the
turn's path are wrapped to note CLOCK_MONOTONIC times per chat; the harness adds
the webhook POST (start) and the fake Bot API receiving ``sendMessage`` (end).  The
table gives each step's p50 / p99 over all turns and its mean over the slowest 1 %:
which steps the tail is made of.  A diagnostic, not a target: the wrappers cost a
little CPU, so its latencies run slightly above `turns`'.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.harness import (
    Box,
    Phases,
    box,
    cpu_seconds,
    host_jiffies,
    machine_info,
    open_loop,
    steal_share,
)
from bench.launch import schedstat_wait
from bench.options import Options, fmt_ms

# (stage, what happened there), in the order a turn passes them
STAGES = (
    ("web_in", "web: update parsed, ingest starts"),
    ("web_out", "web: ingest script answered"),
    ("read", "worker: XREADGROUP returned the entry"),
    ("handed", "worker: hand-off script answered"),
    ("turn", "worker: the turn starts"),
    ("llm_in", "worker: LLM request starts"),
    ("llm_out", "worker: LLM stream done"),
    ("pace_in", "worker: pacing reservation (with the part claim) starts"),
    ("pace_out", "worker: pacing reservation answered"),
)

# --- inside the Parley processes ------------------------------------------------------
_CHAT: contextvars.ContextVar[str] = contextvars.ContextVar("bench_chat", default="")
_MARKS: list[tuple[str, str, float]] = []


def _mark(stage: str, chat: str) -> None:
    _MARKS.append((stage, chat, time.monotonic()))


def _wrap(cls: Any, name: str, before: Any = None, after: Any = None) -> None:
    original = getattr(cls, name)  # AttributeError: a renamed method, fix STAGES' hooks

    async def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(self, args, kwargs)
        result = await original(self, *args, **kwargs)
        if after is not None:
            after(self, args, kwargs, result)
        return result

    setattr(cls, name, wrapped)


def install(path: str) -> None:
    """Wrap the turn path's methods; append marks to ``<path>.<pid>`` (JSON lines)."""
    from agent_core.agent.turn import Turn
    from agent_core.ingest import Ingest
    from agent_core.store.delivery import Delivery
    from agent_core.store.pacing import Pacer

    def conv(event: Any) -> str:
        return str(event.thread.conversation)

    _wrap(
        Ingest,
        "submit",
        lambda s, a, k: _mark("web_in", conv(a[0])),
        lambda s, a, k, r: _mark("web_out", conv(a[0])),
    )

    def after_read(s: Any, a: Any, k: Any, entries: Any) -> None:
        for _eid, event in entries:
            if event is not None:
                _mark("read", conv(event))

    def after_hand_off(s: Any, a: Any, k: Any, began: Any) -> None:
        for thread, _state in began:
            _mark("handed", str(thread.conversation))

    _wrap(Delivery, "read", None, after_read)
    _wrap(Delivery, "handoff_and_begin", None, after_hand_off)
    run = Turn.run

    async def turn_run(self: Any, head: Any) -> Any:
        _CHAT.set(str(self.thread.conversation))
        _mark("turn", _CHAT.get())
        return await run(self, head)

    Turn.run = turn_run  # type: ignore[method-assign]
    for cls, name, stage in (
        (Turn, "_stream", "llm"),
        (Pacer, "book", "pace"),  # reserve() books through it
    ):
        _wrap(
            cls,
            name,
            lambda s, a, k, st=stage: _mark(f"{st}_in", _CHAT.get()),
            lambda s, a, k, r, st=stage: _mark(f"{st}_out", _CHAT.get()),
        )
    out = f"{path}.{os.getpid()}"

    def flush() -> None:  # small appends: a big dump would hold the GIL for ms
        done = 0
        while True:
            time.sleep(0.1)
            n = len(_MARKS)
            if n > done:
                with open(out, "a") as fh:
                    fh.write("".join(json.dumps(m) + "\n" for m in _MARKS[done:n]))
                done = n

    threading.Thread(target=flush, daemon=True, name="bench-stages").start()


# --- in the harness -------------------------------------------------------------------
def _read_marks(path: Path) -> dict[str, dict[str, float]]:
    by_chat: dict[str, dict[str, float]] = {}
    for f in path.parent.glob(path.name + ".*"):
        for line in f.read_text().splitlines():
            try:
                stage, chat, at = json.loads(line)
            except ValueError:
                continue  # a line cut by the process stopping mid-write
            by_chat.setdefault(chat, {}).setdefault(stage, at)  # first time only
    return by_chat


def breakdown(
    starts: dict[int, float], ends: dict[int, float], marks: dict[str, dict[str, float]]
) -> dict[str, Any]:
    """Per-step figures over turns that passed every stage; slowest 1 % separately."""
    names = ["post"] + [s for s, _ in STAGES] + ["sent"]
    turns: list[tuple[float, list[float]]] = []
    for chat, end in ends.items():
        m = marks.get(str(chat), {})
        if chat not in starts or any(s not in m for s, _ in STAGES):
            continue
        times = [starts[chat], *(m[s] for s, _ in STAGES), end]
        steps = [(b - a) * 1000 for a, b in itertools.pairwise(times)]
        turns.append(((end - starts[chat]) * 1000, steps))
    turns.sort(key=lambda t: t[0])
    if not turns:
        return {"turns": 0, "steps": []}
    n = len(turns)
    slow = turns[int(0.99 * n) :] or turns[-1:]
    steps = []
    for i in range(len(names) - 1):
        col = sorted(t[1][i] for t in turns)
        steps.append(
            {
                "step": f"{names[i]} -> {names[i + 1]}",
                "p50_ms": round(col[n // 2], 2),
                "p99_ms": round(col[min(n - 1, int(0.99 * n))], 2),
                "slowest_1pct_mean_ms": round(statistics.mean(t[1][i] for t in slow), 2),
            }
        )
    total = [t[0] for t in turns]
    return {
        "turns": n,
        "total_p50_ms": round(total[n // 2], 2),
        "total_p99_ms": round(total[min(n - 1, int(0.99 * n))], 2),
        "slowest_1pct_mean_ms": round(statistics.mean(t[0] for t in slow), 2),
        "steps": steps,
    }


def probe_summary(
    path: Path, pids: dict[str, int], window: tuple[float, float], spans: list[tuple[float, float]]
) -> dict[str, Any]:
    """Per Parley process (``BENCH_PROBE_FILE`` lines): its CPU share and the share of
    time its event loop waited for a core, over the phase and over the slowest turns'
    spans, and its garbage-collection pauses in the phase."""
    out: dict[str, Any] = {}
    for name, pid in pids.items():
        try:
            lines = [json.loads(x) for x in Path(f"{path}.{pid}").read_text().splitlines()]
        except (OSError, ValueError):
            continue
        cpu = wall = wait = slow_cpu = slow_wall = slow_wait = 0.0
        pauses: list[float] = []
        for (t0, c0, _, w0), (t1, c1, gcs, w1) in itertools.pairwise(lines):
            if not window[0] <= t1 <= window[1]:
                continue
            cpu, wall, wait = cpu + c1 - c0, wall + t1 - t0, wait + w1 - w0
            if any(a <= t1 and t0 <= z for a, z in spans):
                slow_cpu, slow_wall = slow_cpu + c1 - c0, slow_wall + t1 - t0
                slow_wait += w1 - w0
            pauses += [d for _gen, d in gcs or ()]
        out[name] = {
            "cpu_share": round(cpu / wall, 3) if wall else None,
            "cpu_share_in_slowest": round(slow_cpu / slow_wall, 3) if slow_wall else None,
            "runq_wait_share": round(wait / wall, 3) if wall else None,
            "runq_wait_share_in_slowest": round(slow_wait / slow_wall, 3) if slow_wall else None,
        }
        if lines and lines[0][2] is not None:  # a Python process with the GC probe
            out[name] |= {
                "gc_collections": len(pauses),
                "gc_over_2ms": sum(1 for d in pauses if d > 0.002),
                "gc_max_ms": round(1000 * max(pauses), 2) if pauses else 0.0,
            }
    return out


def _watch(path: Path, pids: dict[str, int], stop: threading.Event) -> threading.Thread:
    """The probe's lines (no GC figures) for processes outside Parley: Valkey's main
    thread, and this harness's (the fakes and the load share its event loop)."""
    me = os.getpid()
    tasks = {pid: threading.get_native_id() if pid == me else pid for pid in pids.values()}

    def run() -> None:
        files = {pid: open(f"{path}.{pid}", "a") for pid in pids.values()}  # noqa: SIM115
        try:
            while not stop.wait(0.02):
                now = time.monotonic()
                for pid, fh in files.items():
                    cpu = time.process_time() if pid == me else cpu_seconds(pid)
                    fh.write(
                        json.dumps(
                            [
                                now,
                                cpu,
                                None,
                                schedstat_wait(f"/proc/{pid}/task/{tasks[pid]}/schedstat"),
                            ]
                        )
                        + "\n"
                    )
        finally:
            for fh in files.values():
                fh.close()

    thread = threading.Thread(target=run, daemon=True, name="bench-watch")
    thread.start()
    return thread


def _slowest_spans(starts: dict[int, float], ends: dict[int, float]) -> list[tuple[float, float]]:
    turns = sorted((ends[c] - starts[c], starts[c], ends[c]) for c in ends if c in starts)
    return [(a, z) for _, a, z in turns[int(0.99 * len(turns)) :]]


async def _run(b: Box, o: Options, ph: Phases) -> dict[str, Any]:
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    expect, got = b.tracker.expect, b.tracker.got

    def timed_expect(chat: int) -> Any:
        starts[chat] = time.monotonic()
        return expect(chat)

    def timed_got(chat: int, at: float) -> None:
        if chat in b.tracker.pending:
            ends[chat] = at
        got(chat, at)

    b.tracker.expect, b.tracker.got = timed_expect, timed_got  # type: ignore[method-assign]
    path, probe = b.tmp / "stages", b.tmp / "probe"
    procs = await b.start_parley(
        BENCH_STAGES_FILE=str(path), BENCH_PROBE_FILE=str(probe), WORKER_CONCURRENCY="512"
    )
    warm = 1.0 if o.quick else 3.0
    await open_loop(b, min(o.rate, 50.0), warm, ph.phase("warm-up", warm, b))
    await b.drain(10)
    starts.clear()
    ends.clear()
    others = {"valkey": b.valkey_pid, "harness (fakes+load)": os.getpid()}
    stop = threading.Event()
    watch = _watch(probe, others, stop)
    host0, t_from = host_jiffies(), time.monotonic()
    try:
        await open_loop(b, o.rate, o.duration, ph.phase(f"{o.rate:.0f} turns/s", o.duration, b))
        await b.drain(15)
    finally:
        host1, t_to = host_jiffies(), time.monotonic()
        stop.set()
        watch.join()
    await asyncio.sleep(0.3)  # the processes' last flush (every 0.1 s)
    out = breakdown(starts, ends, _read_marks(path))
    pids = {p.name: p.pid for p in procs} | others
    out["processes"] = probe_summary(probe, pids, (t_from, t_to), _slowest_spans(starts, ends))
    if (steal := steal_share(host0, host1)) is not None:
        out["host_steal"] = steal
    return out


async def scenario_stages(o: Options) -> tuple[dict, Table, list[str]]:
    data: dict[str, Any] = {"options": vars(o).copy()}
    async with box(0.0) as b:
        data["machine"] = machine_info(b.valkey_version)
        with Phases() as ph:
            data["stages"] = await _run(b, o, ph)
    s = data["stages"]
    table = Table(title=f"parley bench stages ({s['turns']} turns at {o.rate:.0f}/s)")
    for col in ("step", "p50 ms", "p99 ms", "slowest 1 % mean ms"):
        table.add_column(col)
    for step in s["steps"]:
        table.add_row(
            step["step"], fmt_ms(step["p50_ms"]), fmt_ms(step["p99_ms"]),
            fmt_ms(step["slowest_1pct_mean_ms"]),
        )  # fmt: skip
    if s["turns"]:
        table.add_row(
            "whole turn", fmt_ms(s["total_p50_ms"]), fmt_ms(s["total_p99_ms"]),
            fmt_ms(s["slowest_1pct_mean_ms"]),
        )  # fmt: skip
    for name, pr in s.get("processes", {}).items():
        table.add_row(
            f"{name}: CPU share | waiting for a core (phase / slowest 1 %)",
            f"{pr['cpu_share']} / {pr['cpu_share_in_slowest']}",
            f"{pr['runq_wait_share']} / {pr['runq_wait_share_in_slowest']}", "",
        )  # fmt: skip
        if "gc_collections" in pr:
            table.add_row(
                f"{name}: GC pauses > 2 ms of all (longest ms)",
                f"{pr['gc_over_2ms']} of {pr['gc_collections']}", "", fmt_ms(pr["gc_max_ms"]),
            )  # fmt: skip
    if s.get("host_steal") is not None:
        table.add_row("CPU stolen by the host during the phase", f"{s['host_steal']:.1%}", "", "")
    notes = [
        "post = the harness POSTs the webhook; sent = the fake Bot API receives sendMessage.",
        *(f"{name}: {what}" for name, what in STAGES),
        "Parley alone (web + worker), fake LLM at 0 ms, pacing off; the wrappers cost a "
        "little CPU, so the whole turn runs slightly slower than in `turns`.",
    ]
    return data, table, notes
