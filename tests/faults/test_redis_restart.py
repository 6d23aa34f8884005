"""Valkey SIGKILLed and started again on the same data, under load.

Processes reconnect on their own, are ready again within 10 s, no message the
web chat acknowledged (202) is lost or answered twice, and no process exits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import long_run
from tests.faults.scenarios import redis_restart
from tests.faults.test_worker_kill import CLIENT_REORDER


def _check(fig: dict[str, Any]) -> None:
    assert fig["restarts"] >= 1, fig
    assert fig["processes_exited"] == 0, fig
    assert fig["ready_again_s"] is not None and fig["ready_again_s"] <= 10, fig
    assert fig["lost"] == 0, fig
    assert fig["duplicated"] == 0, fig
    assert fig["left_pending"] == 0, fig
    if fig["out_of_order_chats"]:
        # Not Parley's order: see CLIENT_REORDER (a platform retries in order).
        pytest.xfail(f"{CLIENT_REORDER}: {fig['out_of_order']}")


async def test_valkey_restart_under_load_short(tmp_path: Path) -> None:
    fig = await redis_restart(tmp_path, rate=10, duration=8, kill_at=3, down_for=1.5, chats=10)
    print(fig)
    _check(fig)


@pytest.mark.slow
@pytest.mark.skipif(not long_run(), reason="long run: PARLEY_LONG=1")
async def test_valkey_restart_under_load_long(tmp_path: Path) -> None:
    fig = await redis_restart(
        tmp_path, rate=30, duration=60, kill_at=10, down_for=3, restarts=3, chats=50
    )
    _check(fig)
