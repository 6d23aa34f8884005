"""Each `parley bench` scenario runs end to end in its tiny (--quick) configuration.

No timing is asserted here: targets are measured and recorded by the full runs
(bench/results/).  Marked slow: about 30 s for all six, real subprocesses.
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
    for name in ("turns", "inflight", "redis", "sessions", "stream"):
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
