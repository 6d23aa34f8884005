"""Usage normalisation: every provider's field names into one TokenUsage."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core.llm.base import TokenUsage
from agent_core.llm.usage import normalize_usage


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # OpenAI chat: cached tokens are inside prompt_tokens
        (
            {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            TokenUsage(100, 20, 0, 0, 120),
        ),
        (
            {
                "prompt_tokens": 100,
                "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 60},
            },
            TokenUsage(40, 20, 60, 0, 120),
        ),
        # OpenAI responses API
        (
            {"input_tokens": 50, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 10}},
            TokenUsage(40, 5, 10, 0, 55),
        ),
        # Anthropic: cache counts beside input_tokens
        (
            {
                "input_tokens": 10,
                "output_tokens": 7,
                "cache_read_input_tokens": 200,
                "cache_creation_input_tokens": 30,
            },
            TokenUsage(10, 7, 200, 30, 247),
        ),
        # Gemini
        (
            {
                "promptTokenCount": 80,
                "candidatesTokenCount": 12,
                "totalTokenCount": 92,
                "cachedContentTokenCount": 30,
            },
            TokenUsage(50, 12, 30, 0, 92),
        ),
        # Ollama native
        ({"prompt_eval_count": 26, "eval_count": 290}, TokenUsage(26, 290, 0, 0, 316)),
        # Bedrock
        (
            {
                "inputTokens": 9,
                "outputTokens": 3,
                "totalTokens": 18,
                "cacheReadInputTokens": 4,
                "cacheWriteInputTokens": 2,
            },
            TokenUsage(9, 3, 4, 2, 18),
        ),
        # DeepSeek
        (
            {
                "prompt_tokens": 64,
                "completion_tokens": 8,
                "prompt_cache_hit_tokens": 48,
                "prompt_cache_miss_tokens": 16,
            },
            TokenUsage(16, 8, 48, 0, 72),
        ),
        # output omitted: total - input
        ({"prompt_tokens": 30, "total_tokens": 45}, TokenUsage(30, 15, 0, 0, 45)),
        ({"promptTokenCount": 30, "totalTokenCount": 31}, TokenUsage(30, 1, 0, 0, 31)),
        # input omitted: total - output
        ({"completion_tokens": 5, "total_tokens": 25}, TokenUsage(20, 5, 0, 0, 25)),
        # other spellings
        ({"prompt_token_count": 3, "completion_token_count": 4}, TokenUsage(3, 4, 0, 0, 7)),
        ({"input_token_count": 3, "output_token_count": 4}, TokenUsage(3, 4, 0, 0, 7)),
        ({"promptTokens": 3, "completionTokens": 4}, TokenUsage(3, 4, 0, 0, 7)),
        ({"prompt_tokens": 3, "generated_tokens": 4}, TokenUsage(3, 4, 0, 0, 7)),
        ({"tokens_in": 3, "tokens_out": 4}, TokenUsage(3, 4, 0, 0, 7)),
        (
            {
                "input_tokens": 3,
                "output_tokens": 4,
                "cache_read_tokens": 1,
                "cache_write_tokens": 2,
            },
            TokenUsage(3, 4, 1, 2, 10),
        ),
        (
            {"input_tokens": 3, "output_tokens": 4, "cache_creation_tokens": 2},
            TokenUsage(3, 4, 0, 2, 9),
        ),
        # nothing / junk
        ({}, TokenUsage()),
        (None, TokenUsage()),
        ({"prompt_tokens": "many", "completion_tokens": None}, TokenUsage()),
    ],
)
def test_variants(raw: dict[str, Any] | None, expected: TokenUsage) -> None:
    assert normalize_usage(raw) == expected


def test_prompt_is_every_prompt_token() -> None:
    u = normalize_usage(
        {"input_tokens": 10, "cache_read_input_tokens": 200, "cache_creation_input_tokens": 30}
    )
    assert u.prompt == 240


def test_cached_tokens_reported_both_ways_count_once() -> None:
    """LiteLLM-style proxies report the cached part inside prompt_tokens
    (prompt_tokens_details.cached_tokens) and again in Anthropic's separate field:
    the same 1,920 tokens, subtracted from the prompt once, never added to it."""
    u = normalize_usage(
        {
            "prompt_tokens": 2006,
            "completion_tokens": 50,
            "total_tokens": 2056,
            "prompt_tokens_details": {"cached_tokens": 1920},
            "cache_read_input_tokens": 1920,
        }
    )
    assert (u.input, u.cache_read, u.prompt, u.output, u.total) == (86, 1920, 2006, 50, 2056)
