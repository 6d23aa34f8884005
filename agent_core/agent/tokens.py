"""Token estimates without a tokenizer (context budgeting, cost reservations)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from agent_core.llm.base import ChatMessage, ToolSpec

# What a provider adds to a prompt that offers tools (its tool-use instructions;
# Anthropic documents ~350 tokens), on top of the specs themselves.
TOOL_PREAMBLE_TOKENS = 300
_TOOLS_CACHE_MAX = 256
# tool sets seen, by the ids of their specs; the value holds the specs themselves,
# so those ids cannot be reused by other objects while the entry lives
_tools_cache: dict[tuple[int, ...], tuple[Sequence[ToolSpec], int]] = {}


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


def tools_tokens(tools: Sequence[ToolSpec]) -> int:
    """A token estimate of ``tools`` as a request carries them (names, descriptions,
    JSON schemas) plus the provider's tool-use preamble; 0 without tools.

    Providers count these in the prompt tokens they report, so the context fill
    and the ratio calibrated from those reports count them too.  Computed once
    per tool set: the registry hands out the same spec objects on every call."""
    if not tools:
        return 0
    key = tuple(map(id, tools))
    hit = _tools_cache.get(key)
    if hit is not None:
        return hit[1]
    specs = [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools
    ]
    tokens = int(text_tokens(orjson.dumps(specs).decode()) + 4 * len(tools)) + TOOL_PREAMBLE_TOKENS
    if len(_tools_cache) >= _TOOLS_CACHE_MAX:
        _tools_cache.clear()
    _tools_cache[key] = (tuple(tools), tokens)
    return tokens
