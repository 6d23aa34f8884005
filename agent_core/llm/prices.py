"""Price table: USD per token for each known model, and its context window.

Lookups strip routing prefixes (``openai/gpt-4o`` -> ``gpt-4o``) and match the
longest known prefix (``gpt-4o-2024-08-06`` -> ``gpt-4o``).  Models on a local
backend (Ollama, the demo model) cost nothing, whatever their name.  Everything
else, open models included (``llama-3.3-70b-versatile`` on Groq,
``deepseek/deepseek-chat`` on OpenRouter, ``mistral-large-latest``, a vLLM
server), is paid for: unknown models get :data:`DEFAULT_PRICE`, with one
warning per model.  ``LLM_PRICES_FILE`` (TOML or JSON) adds or overrides models::

    [models."my-model"]
    input_per_million = 0.5
    output_per_million = 1.5
    cache_read_per_million = 0.05     # optional
    cache_write_per_million = 0.6     # optional
    context_window = 32768            # optional
    supports_vision = false           # optional
    supports_tools = true             # optional
    reasoning = false                 # optional: true sends no temperature / stop (OpenAI)
"""

from __future__ import annotations

import json
import logging
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent_core.errors import ConfigError
from agent_core.llm.base import ModelInfo

log = logging.getLogger(__name__)

M = 1e-6  # per million


def _m(
    name: str,
    inp: float,
    out: float,
    cache_read: float = 0.0,
    cache_write: float = 0.0,
    *,
    ctx: int = 128_000,
    vision: bool = True,
    tools: bool = True,
    reasoning: bool = False,
) -> ModelInfo:
    return ModelInfo(
        name=name,
        context_window=ctx,
        supports_tools=tools,
        supports_vision=vision,
        input_cost_per_token=inp * M,
        output_cost_per_token=out * M,
        cache_read_cost_per_token=cache_read * M,
        cache_write_cost_per_token=cache_write * M,
        reasoning=reasoning,
    )


# USD per million tokens: input, output, cache read, cache write
_TABLE: tuple[ModelInfo, ...] = (
    # OpenAI
    _m("gpt-5", 1.25, 10.0, 0.125, ctx=400_000, reasoning=True),
    _m("gpt-5-mini", 0.25, 2.0, 0.025, ctx=400_000, reasoning=True),
    _m("gpt-5-nano", 0.05, 0.40, 0.005, ctx=400_000, reasoning=True),
    _m("gpt-4.1", 2.0, 8.0, 0.50, ctx=1_047_576),
    _m("gpt-4.1-mini", 0.40, 1.60, 0.10, ctx=1_047_576),
    _m("gpt-4.1-nano", 0.10, 0.40, 0.025, ctx=1_047_576),
    _m("gpt-4o", 2.50, 10.0, 1.25),
    _m("gpt-4o-mini", 0.15, 0.60, 0.075),
    _m("chatgpt-4o", 5.0, 15.0),
    _m("gpt-4-turbo", 10.0, 30.0),
    _m("gpt-4", 30.0, 60.0, ctx=8_192, vision=False),
    _m("gpt-3.5-turbo", 0.50, 1.50, ctx=16_385, vision=False),
    _m("o1", 15.0, 60.0, 7.50, ctx=200_000, reasoning=True),
    _m("o1-mini", 1.10, 4.40, 0.55, ctx=128_000, vision=False, reasoning=True),
    _m("o1-pro", 150.0, 600.0, ctx=200_000, reasoning=True),
    _m("o3", 2.0, 8.0, 0.50, ctx=200_000, reasoning=True),
    _m("o3-mini", 1.10, 4.40, 0.55, ctx=200_000, vision=False, reasoning=True),
    _m("o3-pro", 20.0, 80.0, ctx=200_000, reasoning=True),
    _m("o4-mini", 1.10, 4.40, 0.275, ctx=200_000, reasoning=True),
    # Anthropic (its pricing page): cache read 0.1x input, cache write the
    # 5-minute write price, 1.25x input (the only TTL Parley asks for)
    _m("claude-opus-4-6", 5.0, 25.0, 0.50, 6.25, ctx=200_000),
    _m("claude-opus-4-5", 5.0, 25.0, 0.50, 6.25, ctx=200_000),
    _m("claude-opus-4-1", 15.0, 75.0, 1.50, 18.75, ctx=200_000),
    _m("claude-opus-4", 15.0, 75.0, 1.50, 18.75, ctx=200_000),
    _m("claude-sonnet-4-6", 3.0, 15.0, 0.30, 3.75, ctx=200_000),
    _m("claude-sonnet-4-5", 3.0, 15.0, 0.30, 3.75, ctx=200_000),
    _m("claude-sonnet-4", 3.0, 15.0, 0.30, 3.75, ctx=200_000),
    _m("claude-haiku-4-5", 1.0, 5.0, 0.10, 1.25, ctx=200_000),
    _m("claude-3-7-sonnet", 3.0, 15.0, 0.30, 3.75, ctx=200_000),
    _m("claude-3-5-sonnet", 3.0, 15.0, 0.30, 3.75, ctx=200_000),
    _m("claude-3-5-haiku", 0.80, 4.0, 0.08, 1.0, ctx=200_000),
    _m("claude-3-opus", 15.0, 75.0, 1.50, 18.75, ctx=200_000),
    _m("claude-3-haiku", 0.25, 1.25, 0.03, 0.30, ctx=200_000),
)

# Unknown paid models: priced like a mid-range frontier model so budgets err high.
DEFAULT_PRICE = _m("default", 3.0, 15.0, ctx=128_000, vision=False)

# Open models (any backend may serve them): what their names say of their
# context window and vision.  Not of their price: that depends on the backend.
OPEN_PREFIXES = ("llama", "mistral", "mixtral", "phi", "gemma", "qwen", "deepseek", "codellama")
_OPEN_CTX = (
    ("llama3.1", 131_072),
    ("llama3.2", 131_072),
    ("llama3.3", 131_072),
    ("llama-3.1", 131_072),
    ("llama-3.2", 131_072),
    ("llama-3.3", 131_072),
    ("qwen", 32_768),
    ("mistral", 32_768),
    ("gemma3", 131_072),
    ("deepseek", 65_536),
)
_OPEN_VISION = ("llava", "vision", "gemma3", "qwen2.5vl", "qwen2-vl", "minicpm-v", "bakllava")
_PREFIXES = ("models/", "openai/", "anthropic/", "azure/", "openrouter/")


def strip_prefix(model: str) -> str:
    """``openai/gpt-4o`` -> ``gpt-4o``; ``meta-llama/llama-3.1-8b`` -> ``llama-3.1-8b``."""
    m = model.strip().lower()
    for p in _PREFIXES:
        m = m.removeprefix(p)
    if "/" in m:
        m = m.rsplit("/", 1)[1]
    return m


class PriceTable:
    """Model metadata by name; built once (reads LLM_PRICES_FILE), looked up per call."""

    def __init__(self, prices_file: str = "") -> None:
        self._known: dict[str, ModelInfo] = {m.name: m for m in _TABLE}
        self._cache: dict[tuple[str, bool], ModelInfo] = {}
        self._warned: set[str] = set()
        if prices_file:
            self._known.update(load_prices_file(prices_file))

    def lookup(self, model: str, *, local: bool = False) -> ModelInfo:
        """ModelInfo for ``model``; ``local`` (Ollama) forces zero cost."""
        key = (model, local)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._resolve(model, local)
        return hit

    def _resolve(self, model: str, local: bool) -> ModelInfo:
        bare = strip_prefix(model)
        exact = self._known.get(model.lower()) or self._known.get(bare)
        if exact is None:
            candidates = [k for k in self._known if bare.startswith(k)]
            if candidates:
                exact = self._known[max(candidates, key=len)]
        if exact is not None and not local:
            return replace(exact, name=model)
        ctx = next((c for p, c in _OPEN_CTX if bare.startswith(p)), 8_192)
        vision = any(v in bare for v in _OPEN_VISION)
        if local:  # Ollama, the demo model: free, whatever the name
            if exact is not None:
                ctx = exact.context_window
            return ModelInfo(name=model, context_window=ctx, supports_vision=vision)
        if model not in self._warned:
            self._warned.add(model)
            log.warning(
                "no price known for model %r; using the default of $%.2f/$%.2f per million "
                "tokens (set LLM_PRICES_FILE to correct it)",
                model,
                DEFAULT_PRICE.input_cost_per_token / M,
                DEFAULT_PRICE.output_cost_per_token / M,
            )
        if bare.startswith(OPEN_PREFIXES):  # hosted (Groq, OpenRouter...): paid for
            return replace(DEFAULT_PRICE, name=model, context_window=ctx, supports_vision=vision)
        return replace(DEFAULT_PRICE, name=model)


def load_prices_file(path: str) -> dict[str, ModelInfo]:
    """Parse a TOML or JSON price file into ModelInfo by lower-case model name."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        data: Any = json.loads(raw) if p.suffix.lower() == ".json" else tomllib.loads(raw.decode())
    except (OSError, ValueError) as exc:
        raise ConfigError([f"LLM_PRICES_FILE: cannot read {path!r} ({exc})"]) from None
    models = data.get("models", data) if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ConfigError(["LLM_PRICES_FILE: expected a [models.<name>] table"])
    out: dict[str, ModelInfo] = {}
    problems: list[str] = []
    for name, spec in models.items():
        if not isinstance(spec, dict):
            problems.append(f"LLM_PRICES_FILE: models.{name} must be a table")
            continue
        try:
            out[name.lower()] = _m(
                name.lower(),
                float(spec.get("input_per_million", 0.0)),
                float(spec.get("output_per_million", 0.0)),
                float(spec.get("cache_read_per_million", 0.0)),
                float(spec.get("cache_write_per_million", 0.0)),
                ctx=int(spec.get("context_window", 128_000)),
                vision=bool(spec.get("supports_vision", False)),
                tools=bool(spec.get("supports_tools", True)),
                reasoning=bool(spec.get("reasoning", False)),
            )
        except (TypeError, ValueError):
            problems.append(f"LLM_PRICES_FILE: models.{name} has a non-numeric value")
    if problems:
        raise ConfigError(problems)
    return out
