"""The `parley bench` scenarios: floor, turns, inflight, redis, sessions, stream.

Each scenario returns ``(data, table, notes)``; :func:`run` prints the table,
writes ``bench/results/<date>-<scenario>.json`` and ``.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.harness import (
    Box,
    CpuWindow,
    Phases,
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
from bench.options import Options, fmt_ms
from bench.turns import scenario_turns

__all__ = ["DIAGNOSTICS", "SCENARIOS", "Options", "run"]

SCENARIOS = ("floor", "turns", "inflight", "redis", "sessions", "stream")
DIAGNOSTICS = ("stages",)  # not part of `all`: no target, a look inside
RESULTS = Path(__file__).resolve().parent / "results"


# --- inflight -----------------------------------------------------------------------
STUCK_SECS = 30.0  # inflight: a turn unanswered this long at a step's end is reported


def _inflight_steps_of(o: Options) -> tuple[list[int], float]:
    if o.quick:
        return [max(1, o.target // 2), o.target], 2.0
    # the low steps show where one worker's knee is; the high ones what overload does
    steps = sorted({o.target // d for d in (50, 20, 10, 4, 2, 1)} - {0})
    return steps, max(o.llm_latency * 5, 10.0)


async def _inflight_run(
    b: Box, o: Options, ph: Phases, label: str, procs: list[Any], main: Any, web: Any | None
) -> list[dict[str, Any]]:
    """Closed-loop users, stepwise more, against what ``b`` aims at now; one row per step.

    ``main`` is the process holding the turns (Parley's worker, the floor bot), ``web``
    Parley's web process (None for the floor)."""
    steps, step_secs = _inflight_steps_of(o)
    rows: list[dict[str, Any]] = []
    stop_at = 0.0
    users: list[asyncio.Task[None]] = []

    async def user(delay: float) -> None:
        await asyncio.sleep(delay)
        while time.monotonic() < stop_at:
            fut = await b.post_turn(b.next_chat(), "hello there")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, 60)

    # warm-up (connections, first-call set-up), as in `turns`; not measured
    warm = 1.0 if o.quick else 3.0
    await open_loop(b, 20.0, warm, ph.phase(f"inflight, {label}: warm-up", warm, b))
    await b.drain(o.llm_latency + 10)
    for n in steps:
        b.tracker.reset_window()
        b.llm.peak_in_flight = b.llm.in_flight
        err0 = b.tracker.errors
        retries0 = sum(b.tracker.retries_by_kind.values())
        stop_at = time.monotonic() + step_secs
        # new users start spread over one LLM latency: arrivals stay even
        # (started within 1 s, a 2 s LLM's users come back as one wave)
        ramp = min(max(o.llm_latency, 1.0), step_secs / 4)
        users = [u for u in users if not u.done()]
        new = n - len(users)
        users += [asyncio.create_task(user(ramp * i / max(new, 1))) for i in range(new)]
        tick = ph.phase(f"inflight, {label}: {n} concurrent turns", step_secs, b)
        win = CpuWindow(b, procs)
        win.begin()
        t0 = time.monotonic()
        peak_main = peak_web = 0.0
        while time.monotonic() < stop_at:
            await asyncio.sleep(0.25)
            tick(time.monotonic() - t0)
            peak_main = max(peak_main, rss_mb(main.pid))
            peak_web = max(peak_web, rss_mb(web.pid)) if web is not None else 0.0
            for p in procs:
                p.check()
        lat = lat_summary(b.tracker.latencies)
        cpu = win.end()
        # A turn never answered counts as an error only at the final drain; what is
        # still waiting after STUCK_SECS at a step's end shows here, per step.
        now = time.monotonic()
        stuck = sum(1 for t0, _ in b.tracker.pending.values() if now - t0 > STUCK_SECS)
        rows.append(
            {
                "unanswered_over_30s_at_end": stuck,
                "cpu_share_of_box": {
                    k: round(v / cpu["wall_s"] / (os.cpu_count() or 1), 3)
                    for k, v in cpu["cpu_s"].items()
                },
                "concurrent_users": n,
                "turns": lat["n"],
                "turns_per_s": round(lat["n"] / step_secs, 1),
                "peak_llm_in_flight": b.llm.peak_in_flight,
                "latency_added": lat,
                "errors": b.tracker.errors - err0,
                "webhook_retries": sum(b.tracker.retries_by_kind.values()) - retries0,
                "peak_rss_worker_mb": round(peak_main, 1),
                "peak_rss_web_mb": round(peak_web, 1),
            }
        )
    stop_at = 0.0
    await asyncio.gather(*users, return_exceptions=True)
    await b.drain(30)
    return rows


def _since(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in now.items() if v - before.get(k, 0)}


def _most_users_within(rows: list[dict[str, Any]], ms: float = 100) -> int:
    ok = [
        r["concurrent_users"]
        for r in rows
        if r["latency_added"]["p99_ms"] <= ms
        and not r["errors"]
        and not r["unanswered_over_30s_at_end"]
    ]
    return max(ok, default=0)


async def scenario_inflight(o: Options) -> tuple[dict, Table, list[str]]:
    data: dict[str, Any] = {"options": vars(o).copy()}
    conc = o.worker_concurrency or o.target + 500
    async with box(o.llm_latency) as b:
        data["machine"] = machine_info(b.valkey_version)
        b.tracker.offset = o.llm_latency
        with Phases() as ph:
            procs = await b.start_parley(
                workers=1,
                WORKER_CONCURRENCY=str(conc),
                LLM_POOL_SIZE=str(conc),
                LLM_TIMEOUT_SECS="120",
            )
            worker = next(p for p in procs if "worker" in p.name)
            web = next(p for p in procs if "web" in p.name)
            rows = await _inflight_run(b, o, ph, "parley", procs, worker, web)
            data["errors_total"] = b.tracker.errors
            data["error_kinds"] = dict(b.tracker.errors_by_kind)
            data["webhook_retries"] = dict(b.tracker.retries_by_kind)
            data["rss_peak_mb"] = {
                "worker": rss_mb(worker.pid, peak=True),
                "web": rss_mb(web.pid, peak=True),
            }
            data["telegram_calls"] = dict(b.tg.counts)
            await b.stop(procs)
            # the floor: a bare python-telegram-bot bot that awaits the same fake LLM
            # (aiohttp) and replies, in one process, same users and steps
            err0 = b.tracker.errors
            kinds0 = dict(b.tracker.errors_by_kind)
            retries0 = dict(b.tracker.retries_by_kind)
            fprocs = await b.start_floor(llm_conc=conc)
            floor_rows = await _inflight_run(b, o, ph, "floor", fprocs, fprocs[0], None)
            data["floor"] = {
                "steps": floor_rows,
                "errors_total": b.tracker.errors - err0,
                "error_kinds": _since(b.tracker.errors_by_kind, kinds0),
                "webhook_retries": _since(b.tracker.retries_by_kind, retries0),
                "rss_peak_mb": rss_mb(fprocs[0].pid, peak=True),
            }
            await b.stop(fprocs)
        data["steps"] = rows
    table = Table(title=f"parley bench inflight (one worker, LLM {o.llm_latency:g} s)")
    for col in (
        "users",
        "turns/s (floor)",
        "LLM in flight (peak)",
        "p50",
        "p95",
        "p99 added ms",
        "floor p99 ms",
        "errors (webhook retries) [unanswered > 30 s]",
        "worker RSS MB",
        "box CPU: worker / web / harness / valkey",
    ):
        table.add_column(col)
    for r, f in zip(rows, floor_rows, strict=True):
        la = r["latency_added"]
        share = {k.split("-")[-1].split(" ")[0]: v for k, v in r["cpu_share_of_box"].items()}
        cpu = " / ".join(
            f"{100 * share.get(k, 0.0):.0f}%" for k in ("worker0", "web", "fakes+load", "valkey")
        )
        table.add_row(
            str(r["concurrent_users"]), f'{r["turns_per_s"]} ({f["turns_per_s"]})',
            str(r["peak_llm_in_flight"]), fmt_ms(la["p50_ms"]), fmt_ms(la["p95_ms"]),
            fmt_ms(la["p99_ms"]), fmt_ms(f["latency_added"]["p99_ms"]),
            f'{r["errors"]} ({r["webhook_retries"]}) [{r["unanswered_over_30s_at_end"]}]', str(r["peak_rss_worker_mb"]), cpu,
        )  # fmt: skip
    last = rows[-1]
    data["verdict"] = {
        "errors": data["errors_total"],
        "p99_added_ms_at_target": last["latency_added"]["p99_ms"],
        "peak_rss_worker_mb": data["rss_peak_mb"]["worker"],
        "errors_met": data["errors_total"] == 0,
        "p99_met": last["latency_added"]["p99_ms"] <= 100,
        "most_users_with_p99_within_100ms": _most_users_within(rows),
        "rss_met": data["rss_peak_mb"]["worker"] <= 300,
        "floor_p99_added_ms_at_target": floor_rows[-1]["latency_added"]["p99_ms"],
        "floor_most_users_with_p99_within_100ms": _most_users_within(floor_rows),
        "floor_errors": data["floor"]["errors_total"],
    }
    v = data["verdict"]
    notes = [
        "Closed loop: each user sends its next message when the previous one is answered, so "
        "turns in flight = users; the fake LLM's concurrent requests are counted.",
        f"LLM latency {o.llm_latency:g} s is subtracted from every latency; "
        f"{o.target} turns in flight at {o.llm_latency:g} s each needs "
        f"{o.target / o.llm_latency:.0f} turns/s: where the box cannot do that, the excess "
        "queues and shows as added latency. p99 added ≤ 100 ms up to "
        f"{v['most_users_with_p99_within_100ms']} users in this run (the floor: "
        f"{v['floor_most_users_with_p99_within_100ms']}).",
        "Floor: a bare python-telegram-bot bot in one process whose handler posts to the same "
        "fake LLM (aiohttp) and then replies (`bench/floor_bot.py --llm-url`), run after "
        f"Parley with the same users and steps; concurrent_updates {conc}; its errors: "
        f"{v['floor_errors']}.",
        f"WORKER_CONCURRENCY and LLM_POOL_SIZE set to {conc}; Telegram pacing off (see turns).",
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
        "redis-py sends before any pipeline holding a script) and Multiplexer.roundtrip (one per "
        "round trip on the shared connection); the idle rate (heartbeat, sweeper, "
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
            r["case"], str(r["session_bytes"]), fmt_ms(r["load"]["p50_ms"]), fmt_ms(r["load"]["p99_ms"]),
            fmt_ms(r["save"]["p50_ms"]), fmt_ms(r["save"]["p99_ms"]),
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
        "first LLM token -> first visible message (ms)", fmt_ms(s["p50_ms"]), fmt_ms(s["p95_ms"]),
        fmt_ms(s["p99_ms"]), fmt_ms(s["max_ms"]), "≤ 300",
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
    if name == "stages":
        from bench.stages import scenario_stages

        return await scenario_stages(o)
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
