"""An answer of punctuation alone ('.', '…') means 'nothing to report', as it did
before symbols alone ('🔥🚨') became a message."""

from __future__ import annotations

import pytest

from agent_core.proactive.runner import is_ok


@pytest.mark.parametrize("text", [".", "...", "—", "**.**"])
def test_punctuation_only_answer_is_nothing_to_report(text: str) -> None:
    assert is_ok(text, "HEARTBEAT_OK")


@pytest.mark.parametrize("answer", ["\u203c", "\u2049", "\u203c\u203c", "\u303d"])
def test_an_alert_emoji_filed_as_punctuation_is_a_message(answer: str) -> None:
    """‼ ⁉ 〽 are emoji, though Unicode files them as punctuation."""
    assert not is_ok(answer, "HEARTBEAT_OK")
