"""A worker dies with many turns in flight: its replacement answers them all at once.

Most crashes are no message's fault, so the first reruns of a dead worker's turns run
together (agent_core.proactive.recovery); before, they ran one at a time, and the last
chat of 20 waited ~20 × the LLM's latency.  CI: 20 chats, a 2 s LLM.  The bound below
is far from both: together ≈ lock expiry + one LLM call (~6 s here); one at a time ≥ 40 s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_core.store.embedded import EmbeddedValkey
from tests.faults.scenarios import crash_recovery


async def test_a_dead_workers_turns_are_answered_together_by_its_replacement(
    valkey: EmbeddedValkey, redis: Any, tmp_path: Path
) -> None:
    fig = await crash_recovery(valkey.url, tmp_path, chats=20, llm_latency=2.0)
    assert fig["in_flight_at_kill"] == 20, fig
    assert fig["answered"] == 20 and fig["lost"] == 0 and fig["duplicated"] == 0, fig
    assert fig["given_up_with_notice"] == 0, fig
    # a count of LLM latencies, not a timing of the code: one at a time needs ≥ 20 of them
    assert fig["last_answer_after_kill_s"] < 10 * fig["llm_latency_s"], fig
    assert fig["left_pending"] == 0, fig
