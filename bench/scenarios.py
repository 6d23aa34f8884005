"""The `parley bench` scenarios: floor, turns, inflight, redis, sessions, stream.

Each scenario returns ``(data, table, notes)``; :func:`run` prints the table,
writes ``bench/results/<date>-<scenario>.json`` and ``.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.harness import (
    Box,
    CpuWindow,
    Phases,
    Proc,
    box,
    closed_loop,
    console,
    echo_responder,
    lat_summary,
    machine_info,
    open_loop,
    rss_mb,
    write_results,
)

SCENARIOS = ("floor", "turns", "inflight", "redis", "sessions", "stream")
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Options:
    quick: bool = False
    rate: float = 100.0  # turns/s of the fixed-rate phase
    duration: float = 10.0  # seconds per measured phase
    users: int = 64  # closed-loop users at saturation
    floor_pools: tuple[int, ...] = (64,)
    llm_latency: float = 2.0  # inflight
    target: int = 5000  # inflight
    sessions: tuple[int, ...] = (1_000, 100_000, 1_000_000)
    stream_turns: int = 20
    rounds: int = 3  # turns: alternating fixed-rate rounds per system

    def tiny(self) -> Options:
        return Options(
            quick=True,
            rate=30.0,
            duration=1.5,
            users=8,
            floor_pools=self.floor_pools[-1:],
            llm_latency=0.5,
            target=60,
            sessions=(200, 2_000),
            stream_turns=2,
            rounds=2,
        )


def _ms(x: float) -> str:
    return f"{x:.2f}"


# --- floor / turns -----------------------------------------------------------------
async def _warm(b: Box, ph: Phases, label: str, o: Options) -> None:
    warm = 1.0 if o.quick else 3.0
    await open_loop(b, min(o.rate, 50.0), warm, ph.phase(f"{label}: warm-up", warm, b))
    await b.drain(10)


async def _phase(
    b: Box, ph: Phases, label: str, procs: list[Proc], o: Options, phase: str
) -> tuple[dict[str, Any], list[float]]:
    """One measured phase against the current target: its figures and raw latencies."""
    targets = [p.name for p in procs]
    b.tracker.reset_window()
    err0 = b.tracker.errors
    kinds0 = dict(b.tracker.errors_by_kind)
    win = CpuWindow(b, procs)
    win.begin()
    if phase == "fixed":
        name = f"{label}: {o.rate:.0f} turns/s"
        await open_loop(b, o.rate, o.duration, ph.phase(name, o.duration, b))
        await b.drain(15)
    else:
        name = f"{label}: saturation ({o.users} users)"
        await closed_loop(b, o.users, o.duration, ph.phase(name, o.duration, b))
    w = win.end()
    if phase == "saturation":
        await b.drain(15)
    turns = len(b.tracker.latencies)
    cpu = w["cpu_s"]
    target_cpu = sum(cpu[n] for n in targets)
    total_cpu = sum(cpu.values())
    out = {
        "turns": turns,
        "wall_s": w["wall_s"],
        "turns_per_s": round(turns / w["wall_s"], 1) if w["wall_s"] else 0.0,
        "cpu_s": cpu,
        "cpu_ms_per_turn": round(1000 * target_cpu / turns, 3) if turns else None,
        "cpu_share": {k: round(v / total_cpu, 3) for k, v in cpu.items()} if total_cpu else {},
        "box_cpu_util": round(total_cpu / w["wall_s"] / 2, 3) if w["wall_s"] else 0.0,
        "latency_added": lat_summary(b.tracker.latencies),
        "errors": b.tracker.errors - err0,
        "error_kinds": {
            k: v - kinds0.get(k, 0)
            for k, v in b.tracker.errors_by_kind.items()
            if v - kinds0.get(k, 0)
        },
    }
    return out, list(b.tracker.latencies)


def _pooled(rounds: list[tuple[dict[str, Any], list[float]]]) -> dict[str, Any]:
    """Fixed-rate rounds of one system: median CPU per turn, latencies pooled."""
    figs = [f for f, _ in rounds]
    cpu = [f["cpu_ms_per_turn"] for f in figs if f["cpu_ms_per_turn"] is not None]
    out = dict(figs[len(figs) // 2])  # shares, wall etc. of one (the middle) round
    out.update(
        turns=sum(f["turns"] for f in figs),
        cpu_ms_per_turn=round(statistics.median(cpu), 3) if cpu else None,
        cpu_ms_per_turn_rounds=cpu,
        latency_added=lat_summary([x for _, lat in rounds for x in lat]),
        errors=sum(f["errors"] for f in figs),
        rounds=len(figs),
    )
    return out


async def _measure(b: Box, ph: Phases, label: str, procs: list[Proc], o: Options) -> dict[str, Any]:
    """Warm-up, a fixed-rate phase and a saturation phase against the current target."""
    await _warm(b, ph, label, o)
    out: dict[str, Any] = {"processes": [p.name for p in procs]}
    for phase in ("fixed", "saturation"):
        out[phase], _ = await _phase(b, ph, label, procs, o, phase)
    out["rss_mb"] = {p.name: round(rss_mb(p.pid), 1) for p in procs}
    return out


async def _side_by_side(b: Box, ph: Phases, o: Options, data: dict[str, Any]) -> None:
    """Floor and Parley both running; the fixed-rate phase alternates between them
    for ``o.rounds`` rounds (a noisy box then shifts both alike), then one
    saturation phase each.  CPU per turn = median of the rounds; latencies pooled."""
    pool = o.floor_pools[-1]
    systems: list[tuple[str, str, list[Proc], tuple[str, dict[str, str]]]] = []
    procs = await b.start_floor(pool)
    systems.append((f"floor_pool{pool}", f"floor pool={pool}", procs, b.target()))
    procs = await b.start_parley(WORKER_CONCURRENCY="512")
    systems.append(("parley", "parley web+worker", procs, b.target()))
    fixed: dict[str, list[tuple[dict[str, Any], list[float]]]] = {k: [] for k, *_ in systems}
    for _key, label, _procs, target in systems:
        b.aim(target)
        await _warm(b, ph, label, o)
    for r in range(o.rounds):
        for key, label, procs, target in systems:
            b.aim(target)
            fixed[key].append(await _phase(b, ph, f"{label} #{r + 1}", procs, o, "fixed"))
    for key, label, procs, target in systems:
        b.aim(target)
        sat, _ = await _phase(b, ph, label, procs, o, "saturation")
        data[key] = {
            "processes": [p.name for p in procs],
            "fixed": _pooled(fixed[key]),
            "saturation": sat,
            "rss_mb": {p.name: round(rss_mb(p.pid), 1) for p in procs},
        }
    data["parley"]["telegram_calls"] = dict(b.tg.counts)
    for _key, _label, procs, _target in systems:
        await b.stop(procs)


async def scenario_turns(o: Options, with_parley: bool = True) -> tuple[dict, Table, list[str]]:
    data: dict[str, Any] = {"options": vars(o).copy()}
    async with box(0.0) as b:
        data["machine"] = machine_info(b.valkey_version)
        with Phases() as ph:
            if not with_parley:
                for pool in o.floor_pools:
                    procs = await b.start_floor(pool)
                    label = f"floor pool={pool}"
                    data[f"floor_pool{pool}"] = await _measure(b, ph, label, procs, o)
                    await b.stop(procs)
            else:
                await _side_by_side(b, ph, o, data)
    floor = data[f"floor_pool{o.floor_pools[-1]}"]
    table = Table(title="parley bench turns" if with_parley else "parley bench floor")
    for col in ("figure", "floor", "parley", "ratio", "target", "met"):
        table.add_column(col)
    notes: list[str] = [
        f"Floor = bare python-telegram-bot echo bot, Bot connection pool {o.floor_pools[-1]}, "
        "concurrent_updates 256, fed through a starlette/uvicorn webhook endpoint "
        "(update_queue).",
        "Parley = `parley run web` + `parley run worker` (WORKER_CONCURRENCY 512, "
        "TELEGRAM_CONNECTION_POOL_SIZE 64); CPU is web + worker together.",
        "Telegram pacing off for throughput runs (TELEGRAM_CHAT_INTERVAL_SECS=0, "
        "TELEGRAM_GLOBAL_RATE=0; production: 1 msg/s per chat, 30 msg/s): no streaming "
        "edits, one sendMessage per turn, plus the typing action.",
        f"Both systems run side by side; the {o.rate:.0f} turns/s phase alternates between "
        f"them for {o.rounds} rounds of {o.duration:.0f} s (CPU ms/turn = median of the rounds, "
        "latencies pooled), then one saturation phase each: a noisy shared box shifts both.",
        "Latency added = fake Bot API receives sendMessage − webhook POST sent − fake LLM "
        "latency (0 ms here).",
    ]
    fx = "fixed"
    sat = "saturation"
    if not with_parley:
        for pool in o.floor_pools:
            f = data[f"floor_pool{pool}"]
            table.add_row(
                f"updates/s at saturation (pool {pool})", str(f[sat]["turns_per_s"]), "", "", "", ""
            )
            table.add_row(
                f"CPU ms/update @ {o.rate:.0f}/s (pool {pool})",
                str(f[fx]["cpu_ms_per_turn"]),
                "",
                "",
                "",
                "",
            )
            table.add_row(
                f"p99 ms @ {o.rate:.0f}/s (pool {pool})",
                str(f[fx]["latency_added"]["p99_ms"]),
                "",
                "",
                "",
                "",
            )
        return data, table, notes
    p = data["parley"]

    def ratio(a: Any, c: Any) -> float | None:
        return round(a / c, 2) if a and c else None

    r_cpu = ratio(p[fx]["cpu_ms_per_turn"], floor[fx]["cpu_ms_per_turn"])
    r_cpu_sat = ratio(p[sat]["cpu_ms_per_turn"], floor[sat]["cpu_ms_per_turn"])
    r_tp = ratio(p[sat]["turns_per_s"], floor[sat]["turns_per_s"])
    p99 = p[fx]["latency_added"]["p99_ms"]
    data["verdict"] = {
        "cpu_ratio_fixed": r_cpu,
        "cpu_ratio_saturation": r_cpu_sat,
        "throughput_ratio": r_tp,
        "p99_added_ms_fixed": p99,
        "cpu_target_met": r_cpu is not None and r_cpu <= 2.0,
        "throughput_target_met": r_tp is not None and r_tp >= 0.6,
        "p99_target_met": p99 <= 20.0,
    }
    v = data["verdict"]
    yes = {True: "[green]yes[/]", False: "[red]no[/]"}
    table.add_row(
        f"CPU ms/turn @ {o.rate:.0f}/s", str(floor[fx]["cpu_ms_per_turn"]),
        str(p[fx]["cpu_ms_per_turn"]), f"{r_cpu}×", "≤ 2.0×", yes[v["cpu_target_met"]],
    )  # fmt: skip
    fr, pr = floor[fx].get("cpu_ms_per_turn_rounds"), p[fx].get("cpu_ms_per_turn_rounds")
    if fr and pr and len(fr) == len(pr):
        paired = [round(a / c, 2) for a, c in zip(pr, fr, strict=True) if c]
        data["verdict"]["cpu_ratio_per_round"] = paired
        table.add_row(
            "  rounds (floor / parley / ratio)",
            " ".join(f"{x:.2f}" for x in fr), " ".join(f"{x:.2f}" for x in pr),
            " ".join(f"{x:.2f}" for x in paired), "", "",
        )  # fmt: skip
    table.add_row(
        "CPU ms/turn @ saturation", str(floor[sat]["cpu_ms_per_turn"]),
        str(p[sat]["cpu_ms_per_turn"]), f"{r_cpu_sat}×", "", "",
    )  # fmt: skip
    table.add_row(
        "turns/s at saturation", str(floor[sat]["turns_per_s"]), str(p[sat]["turns_per_s"]),
        f"{r_tp}×", "≥ 0.6×", yes[v["throughput_target_met"]],
    )  # fmt: skip
    for phase, label in ((fx, f"@ {o.rate:.0f}/s"), (sat, "@ saturation")):
        fl, pl = floor[phase]["latency_added"], p[phase]["latency_added"]
        for q in ("p50", "p95", "p99"):
            tgt = "≤ 20 ms" if (phase == fx and q == "p99") else ""
            met = yes[v["p99_target_met"]] if tgt else ""
            table.add_row(
                f"latency {q} ms {label}", _ms(fl[f"{q}_ms"]), _ms(pl[f"{q}_ms"]), "", tgt, met
            )
    table.add_row(
        "errors (fixed / saturation)", f"{floor[fx]['errors']} / {floor[sat]['errors']}",
        f"{p[fx]['errors']} / {p[sat]['errors']}", "", "0", "",
    )  # fmt: skip
    share = p[sat]["cpu_share"]
    table.add_row(
        "CPU share at saturation: fakes+load / valkey",
        f"{floor[sat]['cpu_share'].get('fakes+load (harness)', 0):.0%} / "
        f"{floor[sat]['cpu_share'].get('valkey', 0):.0%}",
        f"{share.get('fakes+load (harness)', 0):.0%} / {share.get('valkey', 0):.0%}", "", "", "",
    )  # fmt: skip
    table.add_row(
        "box CPU use at saturation (of 2 cores)", f"{floor[sat]['box_cpu_util']:.0%}",
        f"{p[sat]['box_cpu_util']:.0%}", "", "", "",
    )  # fmt: skip
    return data, table, notes


# --- inflight -----------------------------------------------------------------------
async def scenario_inflight(o: Options) -> tuple[dict, Table, list[str]]:
    data: dict[str, Any] = {"options": vars(o).copy()}
    if o.quick:
        steps, step_secs = [max(1, o.target // 2), o.target], 2.0
    else:
        steps = sorted({o.target // 10, o.target // 4, o.target // 2, o.target} - {0})
        step_secs = max(o.llm_latency * 5, 10.0)
    rows = []
    async with box(o.llm_latency) as b:
        data["machine"] = machine_info(b.valkey_version)
        conc = str(o.target + 500)
        procs = await b.start_parley(
            workers=1, WORKER_CONCURRENCY=conc, LLM_POOL_SIZE=conc, LLM_TIMEOUT_SECS="120"
        )
        b.tracker.offset = o.llm_latency
        worker = next(p for p in procs if "worker" in p.name)
        web = next(p for p in procs if "web" in p.name)
        stop_at = 0.0
        samples: list[dict[str, Any]] = []
        users: list[asyncio.Task[None]] = []

        async def user(delay: float) -> None:
            await asyncio.sleep(delay)
            while time.monotonic() < stop_at:
                fut = await b.post_turn(b.next_chat(), "hello there")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(fut, 60)

        with Phases() as ph:
            for n in steps:
                b.tracker.reset_window()
                b.llm.peak_in_flight = b.llm.in_flight
                err0 = b.tracker.errors
                stop_at = time.monotonic() + step_secs
                ramp = min(1.0, step_secs / 4)
                new = n - len([u for u in users if not u.done()])
                users = [u for u in users if not u.done()]
                users += [asyncio.create_task(user(ramp * i / max(new, 1))) for i in range(new)]
                tick = ph.phase(f"inflight: {n} concurrent turns", step_secs, b)
                t0 = time.monotonic()
                peak_rss_w = peak_rss_web = 0.0
                while time.monotonic() < stop_at:
                    await asyncio.sleep(0.25)
                    tick(time.monotonic() - t0)
                    rw, rweb = rss_mb(worker.pid), rss_mb(web.pid)
                    peak_rss_w, peak_rss_web = max(peak_rss_w, rw), max(peak_rss_web, rweb)
                    samples.append(
                        {
                            "t": round(time.monotonic() - t0, 2),
                            "step": n,
                            "llm_in_flight": b.llm.in_flight,
                            "rss_worker_mb": round(rw, 1),
                        }
                    )
                    worker.check()
                    web.check()
                lat = lat_summary(b.tracker.latencies)
                rows.append(
                    {
                        "concurrent_users": n,
                        "turns": lat["n"],
                        "turns_per_s": round(lat["n"] / step_secs, 1),
                        "peak_llm_in_flight": b.llm.peak_in_flight,
                        "latency_added": lat,
                        "errors": b.tracker.errors - err0,
                        "peak_rss_worker_mb": round(peak_rss_w, 1),
                        "peak_rss_web_mb": round(peak_rss_web, 1),
                    }
                )
            stop_at = 0.0
            await asyncio.gather(*users, return_exceptions=True)
            await b.drain(30)
        data["steps"] = rows
        data["errors_total"] = b.tracker.errors
        data["error_kinds"] = b.tracker.errors_by_kind
        data["rss_peak_mb"] = {
            "worker": rss_mb(worker.pid, peak=True),
            "web": rss_mb(web.pid, peak=True),
        }
        data["samples"] = samples
        await b.stop(procs)
    table = Table(title=f"parley bench inflight (one worker, LLM {o.llm_latency:g} s)")
    for col in (
        "users",
        "turns/s",
        "LLM in flight (peak)",
        "p50",
        "p95",
        "p99 added ms",
        "errors",
        "worker RSS MB",
    ):
        table.add_column(col)
    for r in rows:
        la = r["latency_added"]
        table.add_row(
            str(r["concurrent_users"]), str(r["turns_per_s"]), str(r["peak_llm_in_flight"]),
            _ms(la["p50_ms"]), _ms(la["p95_ms"]), _ms(la["p99_ms"]), str(r["errors"]),
            str(r["peak_rss_worker_mb"]),
        )  # fmt: skip
    last = rows[-1]
    data["verdict"] = {
        "errors": data["errors_total"],
        "p99_added_ms_at_target": last["latency_added"]["p99_ms"],
        "peak_rss_worker_mb": data["rss_peak_mb"]["worker"],
        "errors_met": data["errors_total"] == 0,
        "p99_met": last["latency_added"]["p99_ms"] <= 100,
        "rss_met": data["rss_peak_mb"]["worker"] <= 300,
    }
    notes = [
        "Closed loop: each user sends its next message when the previous one is answered, so "
        "turns in flight in Parley = users; the fake LLM's concurrent requests are counted.",
        f"LLM latency {o.llm_latency:g} s is subtracted from every latency; "
        f"{o.target} turns in flight at {o.llm_latency:g} s each needs "
        f"{o.target / o.llm_latency:.0f} turns/s: where the box cannot do that, the excess "
        "queues and shows as added latency.",
        f"WORKER_CONCURRENCY and LLM_POOL_SIZE set to {o.target + 500}; Telegram pacing "
        "off (see turns).",
    ]
    return data, table, notes


# --- redis --------------------------------------------------------------------------
def _rtt_counts(b: Box) -> dict[str, int]:
    import json

    total: dict[str, int] = {}
    for f in b.tmp.glob("rtt.*"):
        if f.suffix == ".tmp":
            continue
        with contextlib.suppress(ValueError, OSError):
            for k, v in json.loads(f.read_text()).items():
                total[k] = total.get(k, 0) + v
    return total


async def _commandstats(b: Box) -> dict[str, tuple[int, int]]:
    info = await b.redis.info("commandstats")
    out = {}
    for k, v in info.items():
        name = k.removeprefix("cmdstat_")
        out[name] = (int(v["calls"]), int(v["usec"]))
    return out


def _delta(a: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in c.items():
        if isinstance(v, tuple):
            base = a.get(k, (0, 0))
            d = tuple(x - y for x, y in zip(v, base, strict=True))
            if any(d):
                out[k] = d
        else:
            d = v - a.get(k, 0)
            if d:
                out[k] = d
    return out


def _redis_benchmark(b: Box, quick: bool) -> dict[str, Any] | None:
    exe = shutil.which("redis-benchmark")
    if exe is None:
        return None
    sock = b.valkey_url.removeprefix("unix://")
    n = "2000" if quick else "200000"
    out: dict[str, Any] = {}
    for pipeline in ("1", "16"):
        cmd = [exe, "-s", sock, "-q", "--csv", "-n", n, "-c", "50", "-P", pipeline]
        cmd += ["-t", "set,get,hset,lpush,lrange_100,zadd,xadd"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        rates = {}
        for line in res.stdout.splitlines()[1:]:
            parts = [x.strip('"') for x in line.split(",")]
            with contextlib.suppress(ValueError, IndexError):
                rates[parts[0]] = float(parts[1])
        out[f"P{pipeline}"] = rates
    # EVALSHA of a script like Parley's (a few calls inside): the heavy part of a turn
    script = "redis.call('HGET', KEYS[1], 'v'); redis.call('HSET', KEYS[1], 'v', ARGV[1]); return 1"
    sha = subprocess.run(
        ["redis-cli", "-s", sock, "SCRIPT", "LOAD", script],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if sha and shutil.which("redis-cli"):
        cmd = [
            exe,
            "-s",
            sock,
            "-q",
            "--csv",
            "-n",
            n,
            "-c",
            "50",
            "EVALSHA",
            sha,
            "1",
            "k:__rand_int__",
            "1",
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        for line in res.stdout.splitlines()[1:]:
            parts = [x.strip('"') for x in line.split(",")]
            with contextlib.suppress(ValueError, IndexError):
                out.setdefault("P1", {})["EVALSHA (HGET+HSET)"] = float(parts[1])
    return out


async def scenario_redis(o: Options) -> tuple[dict, Table, list[str]]:
    data: dict[str, Any] = {"options": vars(o).copy()}
    async with box(0.0) as b:
        data["machine"] = machine_info(b.valkey_version)
        procs = await b.start_parley(count_rtt=True, WORKER_CONCURRENCY="512")
        with Phases() as ph:
            warm = 1.0 if o.quick else 3.0
            await open_loop(b, 30, warm, ph.phase("redis: warm-up", warm, b))
            await b.drain(10)
            # idle baseline (heartbeat, sweeper, blocking reads, metrics flush)
            idle = 1.5 if o.quick else 5.0
            await asyncio.sleep(0.6)
            r0 = _rtt_counts(b)
            t0 = time.monotonic()
            tick = ph.phase("redis: idle baseline", idle)
            while time.monotonic() - t0 < idle:
                await asyncio.sleep(0.25)
                tick(time.monotonic() - t0)
            await asyncio.sleep(0.6)
            r1, c1 = _rtt_counts(b), await _commandstats(b)
            idle_wall = time.monotonic() - t0
            idle_rtt = _delta(r0, r1).get("total", 0) / idle_wall
            # load at a fixed rate
            b.tracker.reset_window()
            win = CpuWindow(b, procs)
            win.begin()
            t0 = time.monotonic()
            await open_loop(
                b, o.rate, o.duration, ph.phase(f"redis: {o.rate:.0f} turns/s", o.duration, b)
            )
            await b.drain(15)
            await asyncio.sleep(0.6)
            w = win.end()
            wall = time.monotonic() - t0
            r2, c2 = _rtt_counts(b), await _commandstats(b)
            turns = len(b.tracker.latencies)
            # saturation (closed loop) for the fraction of the ceiling
            b.tracker.reset_window()
            win2 = CpuWindow(b, procs)
            win2.begin()
            await closed_loop(b, o.users, o.duration, ph.phase("redis: saturation", o.duration, b))
            w2 = win2.end()
            sat_tps = len(b.tracker.latencies) / w2["wall_s"]
            await b.drain(15)
        await b.stop(procs)
        bench = _redis_benchmark(b, o.quick)
    rtt = _delta(r1, r2)
    rt_total = rtt.get("total", 0) - idle_rtt * wall
    rt_per_turn = rt_total / turns if turns else float("nan")
    cmds = _delta(c1, c2)
    cmd_calls = sum(v[0] for v in cmds.values())
    per_cmd = {k: round(v[0] / turns, 2) for k, v in sorted(cmds.items(), key=lambda kv: -kv[1][0])}
    usec_per_turn = sum(v[1] for v in cmds.values()) / turns if turns else float("nan")
    valkey_cpu_per_turn = w["cpu_s"]["valkey"] / turns if turns else float("nan")
    ceiling_cpu = 1 / valkey_cpu_per_turn if valkey_cpu_per_turn else float("nan")
    ceiling_exec = 1e6 / usec_per_turn if usec_per_turn else float("nan")
    rt_breakdown = {
        k: round(v / turns, 2)
        for k, v in sorted(rtt.items(), key=lambda kv: -kv[1])
        if k != "total"
    }
    bench_ceiling = None
    if bench and bench.get("P1"):
        p1 = bench["P1"]
        mean_rps = sum(p1.values()) / len(p1)
        bench_ceiling = round(mean_rps / rt_per_turn, 0)
    data.update(
        turns=turns,
        wall_s=round(wall, 2),
        round_trips_per_turn=round(rt_per_turn, 2),
        round_trip_breakdown_per_turn=rt_breakdown,
        idle_round_trips_per_s=round(idle_rtt, 2),
        commands_per_turn=round(cmd_calls / turns, 2) if turns else None,
        commands_per_turn_by_name=per_cmd,
        valkey_exec_usec_per_turn=round(usec_per_turn, 1),
        valkey_cpu_ms_per_turn=round(valkey_cpu_per_turn * 1000, 3),
        ceiling_turns_per_s_valkey_cpu=round(ceiling_cpu, 0),
        ceiling_turns_per_s_exec_only=round(ceiling_exec, 0),
        redis_benchmark=bench,
        ceiling_turns_per_s_redis_benchmark=bench_ceiling,
        saturation_turns_per_s=round(sat_tps, 1),
        fraction_of_ceiling=round(sat_tps / ceiling_cpu, 3) if ceiling_cpu else None,
    )
    data["verdict"] = {"round_trips_met": rt_per_turn <= 8}
    table = Table(title="parley bench redis")
    table.add_column("figure")
    table.add_column("value")
    table.add_column("target")
    table.add_row("round trips per turn (web + worker)", f"{rt_per_turn:.2f}", "≤ 8")
    table.add_row(
        "commands per turn (INFO commandstats, scripts' inner calls included)",
        f"{cmd_calls / turns:.2f}" if turns else "-",
        "",
    )
    for k, v in list(rt_breakdown.items())[:12]:
        table.add_row(f"  round trips starting with {k}", str(v), "")
    table.add_row("Valkey CPU per turn (ms)", f"{valkey_cpu_per_turn * 1000:.3f}", "")
    table.add_row("ceiling turns/s (one Valkey core / CPU per turn)", f"{ceiling_cpu:.0f}", "")
    if bench_ceiling:
        table.add_row(
            "ceiling turns/s (redis-benchmark P1 mean / round trips)", f"{bench_ceiling:.0f}", ""
        )
    table.add_row("saturation turns/s (this run)", f"{sat_tps:.1f}", "")
    table.add_row("fraction of the Valkey ceiling", f"{sat_tps / ceiling_cpu:.1%}", "report")
    notes = [
        "Round trips: bench.launch wraps redis-py's AbstractConnection.send_packed_command in the "
        "web and worker processes (one per command, one per pipeline, one per SCRIPT EXISTS that "
        "redis-py sends before any pipeline holding a script); the idle rate (heartbeat, sweeper, "
        "XREADGROUP BLOCK timeouts, metrics) measured just before is subtracted.",
        "Commands: INFO commandstats delta over the fixed-rate phase / turns answered "
        "(EVALSHA counts once, plus each call its script makes).",
        "Ceiling: Valkey process CPU (utime+stime) over the same phase / turns -> turns/s one "
        "fully busy Valkey core could carry with this mix (Valkey executes commands on one thread).",
    ]
    if bench:
        notes.append(
            "redis-benchmark (redis-tools, -c 50, unix socket) on the same Valkey: "
            + "; ".join(
                f"{p}: " + ", ".join(f"{k} {v:.0f}/s" for k, v in r.items())
                for p, r in bench.items()
            )
        )
    return data, table, notes


# --- sessions -----------------------------------------------------------------------
def _session(thread: str, turns: int) -> Any:
    from agent_core.agent.session import Session
    from agent_core.llm.base import ChatMessage

    s = Session(thread)
    for i in range(turns):
        s.history.append(
            ChatMessage("user", f"question {i}: could you explain how this works in a few lines?")
        )
        s.history.append(ChatMessage("assistant", f"answer {i}: " + "It works like this. " * 8))
    s.turns = turns
    return s


async def scenario_sessions(o: Options) -> tuple[dict, Table, list[str]]:
    from agent_core.agent.session import Session
    from agent_core.events import ThreadKey
    from agent_core.store import keys
    from agent_core.store.delivery import Delivery

    data: dict[str, Any] = {"options": vars(o).copy()}
    samples = 300 if o.quick else 3000
    rows: list[dict[str, Any]] = []

    def tk(i: int, prefix: str = "c") -> ThreadKey:
        return ThreadKey("telegram", "123456", f"{prefix}{i}", "")

    async def measure(ids: list[ThreadKey], label: str, n_stored: int, turns: int) -> None:
        d = Delivery(b.redis, b.redis)
        loads, saves, sizes = [], [], []
        for t in ids:
            a = time.perf_counter()
            ver, raw = await d.load_session(t)
            s = Session.load(str(t), ver, raw)
            c = time.perf_counter()
            s.turns += 1
            body = s.to_json()
            res = await d.save_session(t, body, ver)
            e = time.perf_counter()
            assert res > 0, res
            loads.append(c - a)
            saves.append(e - c)
            sizes.append(len(body))
        rows.append(
            {
                "case": label,
                "stored_sessions": n_stored,
                "history_turns": turns,
                "session_bytes": int(sum(sizes) / len(sizes)),
                "load": lat_summary(loads),
                "save": lat_summary(saves),
            }
        )

    async with box(0.0) as b:
        data["machine"] = machine_info(b.valkey_version)
        # no AOF / RDB for the bulk fill (GBs on disk otherwise); latency is in-memory anyway
        await b.redis.config_set("appendonly", "no")
        await b.redis.config_set("save", "")
        rep = _session(str(tk(0)), 10).to_json()
        stored = 0
        with Phases() as ph:
            for count in o.sessions:
                base = stored
                tick = ph.phase(f"sessions: fill to {count:,}", count - base)
                batch = 2000
                while stored < count:
                    n = min(batch, count - stored)
                    async with b.redis.pipeline(transaction=False) as pipe:
                        for i in range(stored, stored + n):
                            pipe.hset(keys.session(tk(i)), mapping={"v": 1, "d": rep})
                        await pipe.execute()
                    stored += n
                    tick(stored - base)
                ids = [tk(random.randrange(count)) for _ in range(samples)]
                await measure(ids, f"{count:,} stored, 10-turn history", count, 10)
                mem = await b.redis.info("memory")
                rows[-1]["valkey_used_memory_mb"] = round(int(mem["used_memory"]) / 2**20, 1)
            # history length: 10 vs 500 turns (raw, and trimmed as the agent stores it)
            from agent_core.settings import CoreSettings

            max_msgs = CoreSettings.model_fields["max_history_messages"].default
            for label, turns, trim in (
                ("10-turn history", 10, False),
                ("500-turn history, untrimmed (never stored by Parley)", 500, False),
                (f"500-turn history after compaction (trim to {max_msgs} messages)", 500, True),
            ):
                ids = [tk(i, f"h{turns}{trim}") for i in range(min(samples, 500))]
                async with b.redis.pipeline(transaction=False) as pipe:
                    for t in ids:
                        s = _session(str(t), turns)
                        if trim:
                            s.trim(max_msgs)
                        pipe.hset(keys.session(t), mapping={"v": 1, "d": s.to_json()})
                    await pipe.execute()
                await measure(ids, label, stored, turns)
    data["rows"] = rows
    table = Table(
        title="parley bench sessions (load = HMGET + parse, save = serialise + version-checked script)"
    )
    for col in ("case", "bytes", "load p50 ms", "load p99 ms", "save p50 ms", "save p99 ms"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["case"], str(r["session_bytes"]), _ms(r["load"]["p50_ms"]), _ms(r["load"]["p99_ms"]),
            _ms(r["save"]["p50_ms"]), _ms(r["save"]["p99_ms"]),
        )  # fmt: skip
    notes = [
        f"{samples} sequential load+save pairs on random stored sessions per row; sessions are "
        "written with pipelined HSETs of a representative 10-turn session (no TTL, AOF off for "
        "the fill).",
        "Parley trims history to MAX_HISTORY_MESSAGES (200) after every turn, so a 500-turn "
        "thread is stored as the compacted row.",
    ]
    return data, table, notes


# --- stream -------------------------------------------------------------------------
async def scenario_stream(o: Options) -> tuple[dict, Table, list[str]]:
    data: dict[str, Any] = {"options": vars(o).copy()}
    first_latency = 0.3
    async with box(first_latency) as b:
        data["machine"] = machine_info(b.valkey_version)
        b.llm.responder = echo_responder(pieces=30, event_delay=0.05)
        procs = await b.start_parley(paced=True)  # production pacing: edits at most 1/s
        chats: list[int] = []
        with Phases() as ph:
            tick = ph.phase("stream: turns", o.stream_turns, b)
            for i in range(0, o.stream_turns, 2):
                futs = []
                for _ in range(min(2, o.stream_turns - i)):
                    c = b.next_chat()
                    chats.append(c)
                    futs.append(await b.post_turn(c, "tell me a story"))
                await asyncio.wait_for(asyncio.gather(*futs), 30)
                await asyncio.sleep(2.0)  # let the final edit land before the next pair
                tick(i + 2)
        await b.stop(procs)
        deltas = [
            b.tg.first_visible[c] - b.llm.first_token[c]
            for c in chats
            if c in b.tg.first_visible and c in b.llm.first_token
        ]
        data["first_token_to_first_visible"] = lat_summary(deltas)
        data["telegram_calls"] = dict(b.tg.counts)
    s = data["first_token_to_first_visible"]
    data["verdict"] = {"p99_ms": s["p99_ms"], "met": s["p99_ms"] <= 300}
    table = Table(title="parley bench stream")
    for col in ("figure", "p50", "p95", "p99", "max", "target"):
        table.add_column(col)
    table.add_row(
        "first LLM token -> first visible message (ms)", _ms(s["p50_ms"]), _ms(s["p95_ms"]),
        _ms(s["p99_ms"]), _ms(s["max_ms"]), "≤ 300",
    )  # fmt: skip
    notes = [
        f"{s['n']} turns, two chats at a time; fake LLM: first token after {first_latency:g} s, "
        "30 chunks 50 ms apart (OpenAI SSE).  Production Telegram pacing (defaults): the "
        "first text is sent at once, then edited at most once per second.",
        "Measured between the fake LLM writing its first content chunk and the fake Bot API "
        "receiving sendMessage for that chat (same clock, CLOCK_MONOTONIC).",
    ]
    return data, table, notes


# --- entry ----------------------------------------------------------------------------
async def _run_one(name: str, o: Options) -> tuple[dict, Table, list[str]]:
    if name == "floor":
        return await scenario_turns(o, with_parley=False)
    if name == "turns":
        return await scenario_turns(o)
    if name == "inflight":
        return await scenario_inflight(o)
    if name == "redis":
        return await scenario_redis(o)
    if name == "sessions":
        return await scenario_sessions(o)
    if name == "stream":
        return await scenario_stream(o)
    raise ValueError(name)


def run(
    name: str, o: Options, out_dir: Path | None = None, command: str = "", timeout: float = 900
) -> dict:
    """Run one scenario (bounded by ``timeout``), print and record it; return its data."""
    if o.quick:
        o = o.tiny()
    started = dt.datetime.now().isoformat(timespec="seconds")

    async def bounded() -> tuple[dict, Table, list[str]]:
        return await asyncio.wait_for(_run_one(name, o), timeout)

    data, table, notes = asyncio.run(bounded())
    data["scenario"] = name
    data["started"] = started
    data["command"] = command or f"parley bench {name}" + (" --quick" if o.quick else "")
    data["notes"] = notes
    console.print(table)
    for n in notes:
        console.print(f"[dim]- {n}[/]")
    jpath, mpath = write_results(name, data, table, notes, out_dir or RESULTS)
    console.print(f"[dim]wrote {jpath} and {mpath}[/]")
    return data
