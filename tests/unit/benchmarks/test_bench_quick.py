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
