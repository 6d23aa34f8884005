"""Anthropic's prompt cache, as the fake Messages API (``llm_servers``) plays it.

* :func:`cache_control_problem`: what the real API refuses about
  ``cache_control`` (its 400 message), or "": more than 4 breakpoints, a type
  other than ``ephemeral``, a ttl other than ``5m`` / ``1h`` (or ``1h`` after
  ``5m``), a breakpoint on an empty text block or on a thinking block.
* :class:`PromptCache`: per model, the prompt prefixes (tools, then system, then
  messages) written at each breakpoint, each kept for its breakpoint's ttl
  (:data:`TTL_SECS`: 5 minutes, or 1 hour) after its last use.  A request reads the longest stored prefix found at one of its
  breakpoints or up to :data:`LOOKBACK` blocks before it, writes the rest up to
  its last breakpoint when that prefix reaches the model's minimum, and pays
  full input price for what follows; :meth:`PromptCache.account` returns the
  counts the way the API reports them (``input_tokens`` is only the part after
  the last breakpoint that was neither read nor written; ``cache_creation``
  splits the written tokens by ttl).

A block's tokens are its JSON length / 4 (+1) without the ``cache_control``:
what matters here is that equal prefixes count the same.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

MAX_BREAKPOINTS = 4
LOOKBACK = 20  # blocks before a breakpoint where the API still finds a cached prefix
TTL_SECS = {"5m": 300.0, "1h": 3600.0}  # "ephemeral" lifetimes, refreshed by every read
# the shortest prefix each model caches (tokens); shorter ones are just not cached
MIN_CACHEABLE: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-6", 4096),
    ("claude-opus-4-5", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-3-5-haiku", 2048),
    ("claude-3-haiku", 2048),
)
DEFAULT_MIN_CACHEABLE = 1024  # the Sonnets, Opus 4 / 4.1, ...
_THINKING = ("thinking", "redacted_thinking")


def prompt_blocks(body: Any) -> list[tuple[str, dict[str, Any]]]:
    """(location, block) of every block of the prompt, in the order it is cached."""
    if not isinstance(body, dict):
        return []
    out: list[tuple[str, dict[str, Any]]] = []
    tools = body.get("tools")
    if isinstance(tools, list):
        out += [(f"tools.{i}", t) for i, t in enumerate(tools) if isinstance(t, dict)]
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append(("system", {"type": "text", "text": system}))
    elif isinstance(system, list):
        out += [(f"system.{i}", b) for i, b in enumerate(system) if isinstance(b, dict)]
    messages = body.get("messages")
    for i, m in enumerate(messages if isinstance(messages, list) else []):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for j, b in enumerate(content if isinstance(content, list) else []):
            if isinstance(b, dict):
                # the role and the message boundary are part of the prefix
                out.append((f"messages.{i}.content.{j}", {"_role": m.get("role"), "_n": i, **b}))
    return out


def _marks(where: str, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The block and, in a tool_result, its content blocks: each may carry a breakpoint."""
    found = [(where, block)]
    if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
        found += [
            (f"{where}.content.{k}", c)
            for k, c in enumerate(block["content"])
            if isinstance(c, dict)
        ]
    return [(w, b) for w, b in found if "cache_control" in b]


def cache_control_problem(body: Any) -> str:
    """The real API's 400 message about ``cache_control`` in ``body``, or ""."""
    marks: list[tuple[str, str]] = []
    for where, block in prompt_blocks(body):
        for w, b in _marks(where, block):
            cc, kind = b["cache_control"], b.get("type")
            if kind in _THINKING:
                return f"{w}.{kind}.cache_control: Extra inputs are not permitted"
            if not isinstance(cc, dict) or cc.get("type") != "ephemeral":
                return f"{w}.cache_control.type: Input should be 'ephemeral'"
            ttl = cc.get("ttl", "5m")
            if ttl not in ("5m", "1h"):
                return f"{w}.cache_control.ttl: Input should be '5m' or '1h'"
            if kind == "text" and not str(b.get("text", "")):
                return f"{w}.text: cache_control cannot be set for empty text blocks"
            if ttl == "1h" and any(t == "5m" for _, t in marks):
                return (
                    f"{w}.cache_control.ttl: a ttl='1h' cache_control block must not come "
                    "after a ttl='5m' cache_control block. Note that blocks are processed in "
                    "the following order: `tools`, `system`, `messages`."
                )
            marks.append((w, ttl))
    if len(marks) > MAX_BREAKPOINTS:
        return (
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(marks)}."
        )
    return ""


def _strip(block: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [_strip(c) if isinstance(c, dict) else c for c in out["content"]]
    return out


def block_tokens(block: dict[str, Any]) -> int:
    """The fake's token count of one block (its JSON length / 4, at least 1)."""
    shown = {k: v for k, v in _strip(block).items() if not k.startswith("_")}
    return len(json.dumps(shown, sort_keys=True, ensure_ascii=False)) // 4 + 1


def prompt_tokens(body: Any) -> int:
    """Every input token of ``body`` as the fake counts them (cached or not)."""
    return sum(block_tokens(b) for _, b in prompt_blocks(body))


class PromptCache:
    """The prefixes one fake server has cached, per model (see the module doc)."""

    def __init__(
        self, min_tokens: int | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_tokens = min_tokens  # None: each model's real minimum
        self.clock = clock
        # model -> prefix hash -> (expiry, lifetime)
        self._stored: dict[str, dict[str, tuple[float, float]]] = {}

    def minimum(self, model: str) -> int:
        if self.min_tokens is not None:
            return self.min_tokens
        bare = model.lower().rsplit("/", 1)[-1]
        return next((n for p, n in MIN_CACHEABLE if bare.startswith(p)), DEFAULT_MIN_CACHEABLE)

    def clear(self) -> None:
        """Forget everything (as if five minutes had passed)."""
        self._stored.clear()

    def entries(self, model: str) -> int:
        return len(self._stored.get(model, {}))

    def account(self, body: dict[str, Any]) -> dict[str, Any]:
        """Serve ``body``: read and write the cache; the usage counts the API reports."""
        model = str(body.get("model") or "")
        blocks = [b for _, b in prompt_blocks(body)]
        hashes: list[str] = []
        ends: list[int] = []  # tokens of the prefix ending with each block
        h, total = hashlib.sha256(model.encode()), 0
        for b in blocks:
            h.update(json.dumps(_strip(b), sort_keys=True).encode())
            hashes.append(h.copy().hexdigest())
            total += block_tokens(b)
            ends.append(total)
        marks = [i for i, b in enumerate(blocks) if _marked(b)]
        now = self.clock()
        store = self._stored.setdefault(model, {})
        for k in [k for k, (expiry, _) in store.items() if expiry <= now]:
            del store[k]
        hit = -1
        for m in marks:
            for p in range(m, max(m - LOOKBACK, 0) - 1, -1):
                if hashes[p] in store:
                    hit = max(hit, p)
                    break
        read = ends[hit] if hit >= 0 else 0
        write = 0
        by_ttl = {"5m": 0, "1h": 0}
        minimum = self.minimum(model)
        if marks and ends[marks[-1]] >= minimum:
            write = ends[marks[-1]] - read
            start = read
            for m in marks:
                ttl = _ttl(blocks[m])
                if ends[m] >= minimum:
                    store[hashes[m]] = (now + TTL_SECS[ttl], TTL_SECS[ttl])
                if ends[m] > start:  # the tokens up to this breakpoint live this long
                    by_ttl[ttl] += ends[m] - start
                    start = ends[m]
        if hit >= 0:
            lifetime = store[hashes[hit]][1]
            store[hashes[hit]] = (now + lifetime, lifetime)  # a read refreshes the entry
        return {
            "input_tokens": total - read - write,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "cache_creation": {
                "ephemeral_5m_input_tokens": by_ttl["5m"],
                "ephemeral_1h_input_tokens": by_ttl["1h"],
            },
        }


def _ttl(block: dict[str, Any]) -> str:
    """The ttl of the breakpoint on ``block`` (or on its last marked content block)."""
    cc = block.get("cache_control")
    if not isinstance(cc, dict):
        content = block.get("content")
        marked = (
            [c["cache_control"] for c in content if isinstance(c, dict) and "cache_control" in c]
            if isinstance(content, list)
            else []
        )
        cc = marked[-1] if marked else {}
    return str(cc.get("ttl", "5m"))


def _marked(block: dict[str, Any]) -> bool:
    if "cache_control" in block:
        return True
    content = block.get("content")
    return isinstance(content, list) and any(
        isinstance(c, dict) and "cache_control" in c for c in content
    )


def with_usage(events_or_json: Any, usage: dict[str, Any]) -> Any:
    """A copy of an Anthropic answer (JSON body or SSE events) reporting ``usage``."""
    full = {
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage["cache_creation_input_tokens"],
            "ephemeral_1h_input_tokens": 0,
        },
        **usage,
    }
    counts = {k: v for k, v in usage.items() if k != "cache_creation"}
    copied = json.loads(json.dumps(events_or_json))
    if isinstance(copied, dict):
        copied.setdefault("usage", {}).update(full)
        return copied
    for _name, data in copied:
        if not isinstance(data, dict):
            continue
        if data.get("type") == "message_start":
            data.setdefault("message", {}).setdefault("usage", {}).update(full)
        elif data.get("type") == "message_delta":
            # newer API versions repeat the input counts here, cumulatively
            data.setdefault("usage", {}).update(counts)
    return [tuple(e) for e in copied]
