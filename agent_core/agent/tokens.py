"""Token estimates without a tokenizer (context budgeting, cost reservations)."""

from __future__ import annotations

from collections.abc import Sequence

from agent_core.llm.base import ChatMessage


def text_tokens(text: str) -> float:
    """A token estimate for ``text`` without a tokenizer: words × 1.3 or characters ÷
    4, whichever is larger; a CJK, kana, hangul or Thai character counts as about one
    token (such text has few spaces, so counting words would see almost none)."""
    if text.isascii():
        return max(len(text.split()) * 1.3, len(text) / 4)
    wide = sum(1 for ch in text if ord(ch) >= 0x2E80 or 0x0E00 <= ord(ch) <= 0x0E7F)
    return max(len(text.split()) * 1.3, (len(text) - wide) / 4 + wide)


def estimate_message(m: ChatMessage) -> float:
    tokens = text_tokens(m.content)
    for tc in m.tool_calls:
        tokens += text_tokens(str(tc.arguments)) + 1.3
    return tokens + 4


def estimate(messages: Sequence[ChatMessage], ratio: float = 1.0) -> int:
    return int(sum(estimate_message(m) for m in messages) * ratio)


def by_role(messages: Sequence[ChatMessage], ratio: float = 1.0) -> dict[str, int]:
    out = {"system": 0, "user": 0, "assistant": 0, "tool": 0}
    for m in messages:
        out[m.role] = out.get(m.role, 0) + int(estimate_message(m) * ratio)
    return out
