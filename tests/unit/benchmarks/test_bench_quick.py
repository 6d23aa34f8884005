"""Each `parley bench` scenario runs end to end in its tiny (--quick) configuration.

No timing is asserted here: targets are measured and recorded by the full runs
(bench/results/).  Marked slow: about 35 s for all seven, real subprocesses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_every_scenario_runs_quick(tmp_path: Path) -> None:
    out = tmp_path / "results"
    for name in ("turns", "inflight", "redis", "sessions", "stream", "stages"):
        res = subprocess.run(
            [sys.executable, "-m", "bots.cli", "bench", name, "--quick", "--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert res.returncode == 0, f"{name}: {res.stderr[-2000:]}"
        (jpath,) = out.glob(f"*-{name}.json")
        data = json.loads(jpath.read_text())
        assert data["scenario"] == name
        assert data["machine"]["cores"]
        assert (out / jpath.name.replace(".json", ".md")).is_file()
        if name == "inflight":
            # Parley and the floor both answered at every step
            assert all(r["turns"] > 0 for r in data["steps"])
            assert all(r["turns"] > 0 for r in data["floor"]["steps"])
            assert len(data["floor"]["steps"]) == len(data["steps"])
        if name == "stages":
            # the probe ran in both Parley processes through the measured phase
            procs = data["stages"]["processes"]
            assert set(procs) == {"parley-web", "parley-worker0", "valkey", "harness (fakes+load)"}
            assert all(p["cpu_share"] > 0 for p in procs.values())
            assert 0 <= data["stages"]["host_steal"] < 1
        if name == "turns":
            rounds = data["parley"]["fixed"]["host_steal_rounds"]
            assert len(rounds) == data["parley"]["fixed"]["rounds"]


def test_unknown_scenario_is_one_clear_line() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "bots.cli", "bench", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert "unknown scenario" in res.stderr
    assert "Traceback" not in res.stderr


def test_stages_breakdown_splits_each_turn_and_skips_incomplete_ones() -> None:
    from bench.stages import STAGES, breakdown

    names = [s for s, _ in STAGES]
    marks: dict[str, dict[str, float]] = {}
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for chat in range(100):
        t = float(chat)
        starts[chat] = t
        # every step 1 ms, except the LLM step of chat 99: 50 ms
        marks[str(chat)] = {}
        for i, name in enumerate(names):
            extra = 0.05 if chat == 99 and i >= names.index("llm_out") else 0.0
            marks[str(chat)][name] = t + (i + 1) / 1000 + extra
        ends[chat] = t + (len(names) + 1) / 1000 + (0.05 if chat == 99 else 0.0)
    marks["7"].pop("pace_in")  # a turn that missed a stage is left out
    out = breakdown(starts, ends, marks)
    assert out["turns"] == 99
    steps = {s["step"]: s for s in out["steps"]}
    assert len(steps) == len(names) + 1
    assert steps["llm_in -> llm_out"]["p50_ms"] == 1.0
    assert steps["llm_in -> llm_out"]["slowest_1pct_mean_ms"] == 51.0
    assert steps["post -> web_in"]["slowest_1pct_mean_ms"] == 1.0
    assert out["total_p50_ms"] == len(names) + 1


def test_probe_summary_separates_the_slowest_turns_and_counts_collections(
    tmp_path: Path,
) -> None:
    from bench.stages import probe_summary

    # one line every 20 ms for 1 s: CPU 5 ms per line, 15 ms per line in 0.5-0.6 s,
    # where the loop also waited 4 ms per line for a core (1 ms elsewhere);
    # one 30 ms collection at 0.3 s and one 1 ms collection at 0.7 s
    lines, cpu, wait = [], 0.0, 0.0
    for i in range(51):
        t = i * 0.02
        slow = 0.5 < t <= 0.6
        cpu += 0.015 if slow else 0.005 if i else 0.0
        wait += 0.004 if slow else 0.001 if i else 0.0
        gcs = [[2, 0.03]] if i == 15 else [[0, 0.001]] if i == 35 else []
        lines.append(json.dumps([t, cpu, gcs, wait]))
    (tmp_path / "probe.42").write_text("\n".join(lines) + "\n")
    out = probe_summary(tmp_path / "probe", {"w": 42, "gone": 43}, (0.0, 1.0), [(0.51, 0.59)])
    assert set(out) == {"w"}  # a process without a probe file is left out
    w = out["w"]
    assert w["cpu_share"] == pytest.approx((45 * 0.005 + 5 * 0.015) / 1.0, abs=0.01)
    assert w["cpu_share_in_slowest"] == pytest.approx(0.75, abs=0.01)
    assert w["runq_wait_share"] == pytest.approx((45 * 0.001 + 5 * 0.004) / 1.0, abs=0.01)
    assert w["runq_wait_share_in_slowest"] == pytest.approx(0.2, abs=0.01)
    assert (w["gc_collections"], w["gc_over_2ms"], w["gc_max_ms"]) == (2, 1, 30.0)
