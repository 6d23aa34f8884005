"""An answer of punctuation alone ('.', '…') means 'nothing to report', as it did
before symbols alone ('🔥🚨') became a message."""

from __future__ import annotations

import pytest

from agent_core.proactive.runner import is_ok


@pytest.mark.parametrize("text", [".", "...", "—", "**.**"])
def test_punctuation_only_answer_is_nothing_to_report(text: str) -> None:
    assert is_ok(text, "HEARTBEAT_OK")
