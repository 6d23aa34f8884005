"""SIGTERM a worker mid-turn: it finishes within the drain window, or hands the turn
back for another worker; every message is answered exactly once, exit code 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_core.store.embedded import EmbeddedValkey
from tests.faults.scenarios import sigterm_mid_turn


async def test_sigterm_mid_turn_finishes_within_grace(
    valkey: EmbeddedValkey, redis: Any, tmp_path: Path
) -> None:
    fig = await sigterm_mid_turn(valkey.url, tmp_path, chats=6, llm_latency=1.5, grace=10)
    print(fig)
    assert fig["exit_code"] == 0, fig
    assert fig["exit_s"] < 10 + 5, fig
    assert fig["lost"] == 0 and fig["duplicated"] == 0, fig
    assert fig["left_pending"] == 0, fig


async def test_sigterm_mid_turn_hands_back_when_grace_is_short(
    valkey: EmbeddedValkey, redis: Any, tmp_path: Path
) -> None:
    fig = await sigterm_mid_turn(valkey.url, tmp_path, chats=6, llm_latency=4.0, grace=0.5)
    print(fig)
    assert fig["exit_code"] == 0, fig
    assert fig["exit_s"] < 0.5 + 5, fig
    assert fig["lost"] == 0 and fig["duplicated"] == 0, fig
    assert fig["left_pending"] == 0, fig
