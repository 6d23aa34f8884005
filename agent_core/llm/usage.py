"""Usage normalisation: one :class:`TokenUsage` from any provider's field names.

Providers disagree on names (``prompt_tokens``, ``input_tokens``,
``promptTokenCount``...) and on whether cached tokens are part of the input
count.  OpenAI, Gemini and DeepSeek count cached tokens inside the prompt;
Anthropic reports them beside it.  :class:`TokenUsage` always keeps them apart:
``input`` is the uncached part, so prices apply without double counting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_core.llm.base import TokenUsage

# Each entry is a dotted path; the first one present wins.
INPUT_KEYS = (
    "prompt_tokens",  # OpenAI chat, most compatibles
    "input_tokens",  # Anthropic, OpenAI responses
    "promptTokenCount",  # Gemini
    "prompt_eval_count",  # Ollama native
    "inputTokens",  # Bedrock
    "prompt_token_count",
    "input_token_count",
    "promptTokens",
    "tokens_in",
)
OUTPUT_KEYS = (
    "completion_tokens",
    "output_tokens",
    "candidatesTokenCount",
    "eval_count",
    "outputTokens",
    "completion_token_count",
    "output_token_count",
    "completionTokens",
    "generated_tokens",
    "tokens_out",
)
TOTAL_KEYS = ("total_tokens", "totalTokenCount", "totalTokens", "total_token_count")
# cached tokens reported *inside* the input count (subtracted from it)
CACHE_READ_INCLUDED = (
    "prompt_tokens_details.cached_tokens",
    "input_tokens_details.cached_tokens",
    "cachedContentTokenCount",
    "prompt_cache_hit_tokens",
)
# cached tokens reported *beside* the input count
CACHE_READ_SEPARATE = (
    "cache_read_input_tokens",
    "cacheReadInputTokens",
    "cacheReadInputTokenCount",
    "cache_read_tokens",
)
CACHE_WRITE_SEPARATE = (
    "cache_creation_input_tokens",
    "cacheWriteInputTokens",
    "cacheWriteInputTokenCount",
    "cache_write_tokens",
    "cache_creation_tokens",
)


def _get(raw: Mapping[str, Any], path: str) -> int | None:
    cur: Any = raw
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    if isinstance(cur, bool) or not isinstance(cur, int | float):
        return None
    return int(cur)


def _first(raw: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = _get(raw, k)
        if v is not None:
            return v
    return None


def normalize_usage(raw: Mapping[str, Any] | None) -> TokenUsage:
    """Build a TokenUsage from a provider's usage object (any known field names)."""
    if not raw:
        return TokenUsage()
    prompt = _first(raw, INPUT_KEYS)
    output = _first(raw, OUTPUT_KEYS)
    total = _first(raw, TOTAL_KEYS)
    included = _first(raw, CACHE_READ_INCLUDED)
    separate = _first(raw, CACHE_READ_SEPARATE)
    write = _first(raw, CACHE_WRITE_SEPARATE) or 0

    prompt_all = prompt or 0
    if included is not None:
        # OpenAI-style: the cached part is inside the prompt count.  Proxies
        # (LiteLLM) add Anthropic's separate field beside it for the same
        # tokens: it is not a second share, nothing is added.
        cache_read = included
        uncached = max(prompt_all - included, 0)
    else:
        cache_read = separate or 0
        uncached = prompt_all
        prompt_all = uncached + cache_read + write
    if prompt is None and total is not None and output is not None:
        uncached = max(total - output - cache_read - write, 0)
        prompt_all = uncached + cache_read + write
    if output is None:
        output = max(total - prompt_all, 0) if total is not None else 0
    if total is None:
        total = prompt_all + output
    return TokenUsage(
        input=uncached, output=output, cache_read=cache_read, cache_write=write, total=total
    )
