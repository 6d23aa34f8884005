"""The `turns` and `floor` scenarios: Parley side by side with a bare
python-telegram-bot echo bot (the floor) on the same fakes.

``scenario_turns`` alternates the fixed-rate phase between the two for
``Options.rounds`` rounds, then gives each a saturation phase (bench/README.md).
"""

from __future__ import annotations

import statistics
from typing import Any

from rich.table import Table

from bench.harness import (
    Box,
    CpuWindow,
    Phases,
    Proc,
    box,
    closed_loop,
    lat_summary,
    machine_info,
    open_loop,
    rss_mb,
)
from bench.options import Options, fmt_ms


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
        "host_steal": w["host_steal"],
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
        p99_ms_rounds=[f["latency_added"].get("p99_ms") for f in figs],
        host_steal_rounds=[f.get("host_steal") for f in figs],
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
    data["webhook_retries"] = dict(b.tracker.retries_by_kind)
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
                f"latency {q} ms {label}",
                fmt_ms(fl[f"{q}_ms"]),
                fmt_ms(pl[f"{q}_ms"]),
                "",
                tgt,
                met,
            )
        fr99, pr99 = floor[phase].get("p99_ms_rounds"), p[phase].get("p99_ms_rounds")
        if fr99 and pr99:
            table.add_row(
                "  p99 of each round", " ".join(fmt_ms(x) for x in fr99),
                " ".join(fmt_ms(x) for x in pr99), "", "", "",
            )  # fmt: skip
    fs, ps = floor[fx].get("host_steal_rounds") or [], p[fx].get("host_steal_rounds") or []
    if any(x is not None for x in fs + ps):

        def steal(xs: list[float | None]) -> str:
            return " ".join("?" if x is None else f"{x:.0%}" for x in xs)

        table.add_row(
            f"  CPU stolen by the host, each round @ {o.rate:.0f}/s", steal(fs), steal(ps),
            "", "", "",
        )  # fmt: skip
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
