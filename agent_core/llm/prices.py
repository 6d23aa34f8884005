"""Price table: USD per token for each known model, and its context window.

Lookups strip routing prefixes (``openai/gpt-4o`` -> ``gpt-4o``) and match the
longest known prefix (``gpt-4o-2024-08-06`` -> ``gpt-4o``).  Models on a local
backend (Ollama, the demo model) cost nothing, whatever their name.  Everything
else, open models included (``llama-3.3-70b-versatile`` on Groq,
``deepseek/deepseek-chat`` on OpenRouter, ``mistral-large-latest``, a vLLM
server), is paid for: unknown models get :data:`DEFAULT_PRICE`, with one
warning per model.  ``LLM_PRICES_FILE`` (TOML or JSON) adds or overrides models;
each entry starts from what the table says of its model (the default price for
one it does not know), so a key left out keeps its value; an unknown key, or a
negative or infinite number, stops Parley::

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

import difflib
import json
import logging
import math
import tomllib
from collections.abc import Callable
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
            # each entry starts from what the table says of its model
            entries = load_prices_file(prices_file, lambda n: self._resolve(n, False, warn=False))
            self._known.update(entries)

    def lookup(self, model: str, *, local: bool = False) -> ModelInfo:
        """ModelInfo for ``model``; ``local`` (Ollama) forces zero cost."""
        key = (model, local)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._resolve(model, local)
        return hit

    def _resolve(self, model: str, local: bool, *, warn: bool = True) -> ModelInfo:
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
        if warn and model not in self._warned:
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


# the keys of a price file's entry: a number (>= 0) or a whole number (>= 1) each,
# or true / false
_PRICE_KEYS = {
    "input_per_million": "input_cost_per_token",
    "output_per_million": "output_cost_per_token",
    "cache_read_per_million": "cache_read_cost_per_token",
    "cache_write_per_million": "cache_write_cost_per_token",
}
_FLAG_KEYS = {
    "supports_vision": "supports_vision",
    "supports_tools": "supports_tools",
    "reasoning": "reasoning",
}
KNOWN_KEYS = (*_PRICE_KEYS, "context_window", *_FLAG_KEYS)


def _whole(value: object) -> int | None:
    """A whole number as a prices file may write one (32768, 32768.0 from a JSON
    writer, "32768"); None for anything else (true/false included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _entry(
    where: str, base: ModelInfo, spec: dict[str, Any], problems: list[str]
) -> ModelInfo | None:
    """``base`` with the fields ``spec`` gives; a line in ``problems`` for each key
    that is unknown or whose value is not of its kind (None then)."""
    changes: dict[str, Any] = {}
    bad = len(problems)
    for key, value in spec.items():
        if key in _PRICE_KEYS:
            try:
                if isinstance(value, bool):
                    raise TypeError
                price = float(value)
            except (TypeError, ValueError):
                problems.append(f"{where}: {key} must be a number")
                continue
            if not math.isfinite(price) or price < 0:
                problems.append(f"{where}: {key} must be a finite number, 0 or more")
                continue
            changes[_PRICE_KEYS[key]] = price * M
        elif key == "context_window":
            window = _whole(value)
            if window is None or window < 1:
                problems.append(f"{where}: {key} must be a whole number, 1 or more")
                continue
            changes["context_window"] = window
        elif key in _FLAG_KEYS:
            if not isinstance(value, bool):
                problems.append(f"{where}: {key} must be true or false")
                continue
            changes[_FLAG_KEYS[key]] = value
        else:
            close = difflib.get_close_matches(str(key), KNOWN_KEYS, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            if isinstance(value, dict):  # [models.gpt-4.1]: TOML splits the name at the dot
                hint = 'quote a model name holding a dot: [models."gpt-4.1"]; '
            problems.append(f"{where}: unknown key {key!r} ({hint}known: {', '.join(KNOWN_KEYS)})")
    return None if len(problems) > bad else replace(base, **changes)


def load_prices_file(path: str, base: Callable[[str], ModelInfo]) -> dict[str, ModelInfo]:
    """Parse a TOML or JSON price file into ModelInfo by lower-case model name.  Each
    entry starts from ``base(name)`` (the built-in entry, or the default price of a
    model Parley does not know), so a field the file leaves out keeps its value;
    an unknown key (a misspelt price would be silently lost) or a value that is not
    of its kind (a negative or infinite price) is a ConfigError line."""
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
        where = f"LLM_PRICES_FILE: {path}: models.{json.dumps(name)}"
        if not isinstance(spec, dict):
            problems.append(f"{where} must be a table")
            continue
        info = _entry(where, replace(base(name.lower()), name=name.lower()), spec, problems)
        if info is not None:
            out[name.lower()] = info
    if problems:
        raise ConfigError(problems)
    return out
