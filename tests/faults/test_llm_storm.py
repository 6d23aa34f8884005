"""LLM storms: 429 + Retry-After, 500s, read timeouts, streams cut mid-way, slow first
tokens.  Every turn ends with an answer or a short clear error notice within its
budget, the circuit opens during the storm and closes after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_core.store.embedded import EmbeddedValkey
from tests.faults.harness import long_run
from tests.faults.scenarios import llm_storm


def _check(fig: dict[str, Any]) -> None:
    assert fig["no_reply"] == 0, fig
    assert fig["unclear_reply"] == 0, fig
    assert fig["slowest_turn_s"] <= fig["turn_budget_s"], fig
    assert fig["circuit_open_notices"] >= 1, fig
    assert fig["answers_after_storm"] >= 1, fig
    assert fig["left_pending"] == 0, fig


async def test_llm_storm_short(valkey: EmbeddedValkey, redis: Any, tmp_path: Path) -> None:
    fig = await llm_storm(valkey.url, tmp_path, chats=4, per_chat=3)
    print(fig)
    _check(fig)


@pytest.mark.slow
@pytest.mark.skipif(not long_run(), reason="long run: PARLEY_LONG=1")
async def test_llm_storm_long(valkey: EmbeddedValkey, redis: Any, tmp_path: Path) -> None:
    _check(await llm_storm(valkey.url, tmp_path, chats=10, per_chat=20))
