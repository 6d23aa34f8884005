"""Anthropic Messages API (``POST /v1/messages``).

The system prompt travels apart from the messages; tool calls are ``tool_use``
blocks in the assistant turn and results are ``tool_result`` blocks in the
next user turn; images are base64 ``image`` blocks.  Roles must alternate, so
consecutive messages of one role are merged.  Streaming events:
``message_start`` (input usage), ``content_block_start`` / ``_delta``
(``text_delta``, ``input_json_delta``) / ``_stop``, ``message_delta`` (stop
reason, output usage; newer API versions repeat the input and cache counts
there, cumulatively), ``message_stop``, ``error``.

Prompt caching (on unless ``ANTHROPIC_PROMPT_CACHE=off``): the request carries
``cache_control`` breakpoints where Anthropic recommends them for a multi-turn
agent, see :func:`add_cache_breakpoints`; ``ANTHROPIC_PROMPT_CACHE_TTL=1h`` asks
for the 1-hour cache instead of the 5-minute one.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson

from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    ModelInfo,
    StreamItem,
    TextDelta,
    ToolCall,
)
from agent_core.llm.errors import InvalidResponse, LLMError, Timeout
from agent_core.llm.http import HTTPBackend, status_error
from agent_core.llm.openai import NO_VISION_NOTE
from agent_core.llm.schema import (
    arguments_complete,
    drop_cut_calls,
    fix_tool_calls,
    flatten_tools,
    parse_arguments,
    safe_tool_name,
    wire_history,
)
from agent_core.llm.usage import normalize_usage

log = logging.getLogger(__name__)

API_VERSION = "2023-06-01"
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "billing_error": 402,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


# Anthropic's pattern for tool_use.id / tool_result.tool_use_id
_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")
_NOT_ID = re.compile(r"[^a-zA-Z0-9_-]")
# what an otherwise empty user turn carries (a text block must not be blank)
EMPTY_MESSAGE = "(empty message)"
# blocks the API refuses a cache_control on (they are cached as part of a prefix)
_NOT_CACHEABLE = frozenset({"thinking", "redacted_thinking"})


def tool_id(call_id: str) -> str:
    """``call_id`` as Anthropic accepts it (``^[a-zA-Z0-9_-]+$``).

    Ids from other backends (``functions.search:0`` from Kimi K2) get their
    other characters replaced and a short hash of the original appended, so two
    ids differing only there stay apart; the same id always maps the same way,
    for the ``tool_use`` and its ``tool_result`` alike.  Valid ids are kept.
    """
    if _TOOL_ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:10]
    return f"{_NOT_ID.sub('_', call_id)[:48]}_{digest}".lstrip("_")


def _blocks(m: ChatMessage, vision: bool) -> list[dict[str, Any]]:
    if m.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": tool_id(m.tool_call_id),
                "content": m.content if m.content.strip() else "(no output)",
            }
        ]
    blocks: list[dict[str, Any]] = []
    if m.images and m.role == "user":
        for img in m.images:
            if vision:
                blocks.append(
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": img.mime, "data": img.data_b64},
                    }
                )
            else:
                blocks.append({"type": "text", "text": NO_VISION_NOTE})
    if m.content.strip():  # "text content blocks must contain non-whitespace text"
        blocks.append({"type": "text", "text": m.content})
    for c in m.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": tool_id(c.id),
                "name": safe_tool_name(c.name),
                "input": c.arguments,
            }
        )
    return blocks


def cache_control(ttl: str = "5m") -> dict[str, str]:
    """A breakpoint: ``ephemeral`` lives 5 minutes unless it asks for 1 hour."""
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


def _mark(blocks: list[dict[str, Any]], ttl: str) -> bool:
    """Put a breakpoint on the last block of ``blocks`` that may carry one."""
    for b in reversed(blocks):
        if b.get("type") in _NOT_CACHEABLE:
            continue  # "thinking blocks cannot be cached directly"
        if b.get("type") == "text" and not str(b.get("text", "")).strip():
            continue  # "cache_control cannot be set for empty text blocks"
        b["cache_control"] = cache_control(ttl)
        return True
    return False


def add_cache_breakpoints(body: dict[str, Any], ttl: str = "5m") -> None:
    """Mark ``body`` for Anthropic's prompt cache (``ephemeral``; ``ttl`` 5m or 1h,
    the same on every breakpoint: the API refuses a 1h one after a 5m one).

    The API caches the prompt prefix (tools, then system, then messages) up to
    each ``cache_control`` breakpoint, and reads a cached prefix found at a
    breakpoint or up to about 20 blocks before it.  Three breakpoints at most
    (the limit is 4):

    * the end of the tools + system prefix: the last system block (the system
      is then sent as a list of text blocks), or the last tool without one;
    * the last block of the last message, so the next call of this turn (after
      a tool round) and the next turn read everything before it;
    * the last block of the third message from the end: where the previous
      call put its last breakpoint (its last message, before the assistant's
      answer and the new user turn).  A tool round adding more than 20 blocks
      would otherwise leave that prefix beyond the lookback and rewrite it.

    Prefixes shorter than the model's minimum (1024-4096 tokens) are simply not
    cached by the API; that is no error.
    """
    system = body.get("system")
    if isinstance(system, str) and system.strip():
        body["system"] = [{"type": "text", "text": system, "cache_control": cache_control(ttl)}]
    elif isinstance(system, list) and system:
        _mark(system, ttl)
    elif body.get("tools"):
        body["tools"][-1]["cache_control"] = cache_control(ttl)
    messages: list[dict[str, Any]] = body.get("messages") or []
    if messages:
        _mark(messages[-1]["content"], ttl)
    if len(messages) >= 3:
        _mark(messages[-3]["content"], ttl)


def merge_usage(into: dict[str, Any], new: Any) -> None:
    """Fold one stream event's ``usage`` into ``into``.

    ``message_start`` carries the input and cache counts (and an output count of
    about 1); ``message_delta`` the output count and, in newer API versions, the
    input and cache counts again, all cumulative.  Counts only grow within one
    answer, so the larger is kept: a compatible server that repeats them as 0
    (or null) in the delta does not erase what ``message_start`` said.
    """
    if not isinstance(new, dict):
        return
    for k, v in new.items():
        if v is None:
            continue
        old = into.get(k)
        if _count(v) and _count(old):
            into[k] = max(old, v)
        else:
            into[k] = v


def _count(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


class AnthropicProvider(HTTPBackend):
    def headers(self) -> dict[str, str]:
        h = super().headers()
        h["anthropic-version"] = API_VERSION
        if self.config.api_key:
            h["x-api-key"] = self.config.api_key
        return h

    @property
    def api_root(self) -> str:
        return self.config.base_url.removesuffix("/v1") + "/v1"

    def build_body(self, request: CompletionRequest, *, stream: bool) -> dict[str, Any]:
        model = request.model or self.config.model
        info = self.model_info(model)
        use_tools = bool(request.tools) and info.supports_tools and not self.config.flatten_tools
        # repeated call ids renamed with their results, a second result dropped,
        # unsafe names made safe (schema.wire_history)
        history = wire_history(request.messages)
        source = history if use_tools else flatten_tools(history)
        system = "\n\n".join(m.content for m in source if m.role == "system" and m.content.strip())
        messages: list[dict[str, Any]] = []
        for m in source:
            if m.role == "system":
                continue
            role = "assistant" if m.role == "assistant" else "user"
            blocks = _blocks(m, info.supports_vision)
            if not blocks:
                if role == "assistant" or (messages and messages[-1]["role"] == "user"):
                    continue  # nothing to say; the turns around it merge
                # a blank user message still takes its turn (else the request
                # would end on the assistant's answer, or two answers would merge)
                blocks = [{"type": "text", "text": EMPTY_MESSAGE}]
            if messages and messages[-1]["role"] == role:
                # tool results must come first in their user turn
                prev: list[dict[str, Any]] = messages[-1]["content"]
                if m.role == "tool":
                    n = sum(1 for b in prev if b["type"] == "tool_result")
                    prev[n:n] = blocks
                else:
                    prev.extend(blocks)
            else:
                messages.append({"role": role, "content": blocks})
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": request.max_tokens or self.config.max_tokens,
            "messages": messages,
        }
        if system:
            body["system"] = system
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stop:
            body["stop_sequences"] = list(request.stop)
        if use_tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        if stream:
            body["stream"] = True
        if self.config.prompt_cache:
            add_cache_breakpoints(body, self.config.cache_ttl)
        return body

    def model_info(self, model: str | None = None) -> ModelInfo:
        """With 1-hour breakpoints a cache write costs 2x the input price (Anthropic's
        published multiplier; the price table holds the 5-minute 1.25x)."""
        info = super().model_info(model)
        if self.config.prompt_cache and self.config.cache_ttl == "1h":
            info = replace(info, cache_write_cost_per_token=2 * info.input_cost_per_token)
        return info

    def _error_event(self, err: Any) -> LLMError:
        kind = err.get("type", "") if isinstance(err, dict) else ""
        body = orjson.dumps({"type": "error", "error": err})
        return status_error(self.name, _ERROR_STATUS.get(kind, 500), body, {}, self._secrets)

    def parse_completion(self, data: Any, request: CompletionRequest) -> Completion:
        if not isinstance(data, dict):
            raise InvalidResponse(f"{self.name}: the answer is not a JSON object")
        if data.get("type") == "error":
            raise self._error_event(data.get("error"))
        content = data.get("content")
        if not isinstance(content, list):
            raise InvalidResponse(f"{self.name}: the answer has no content")
        text: list[str] = []
        calls: list[tuple[ToolCall, bool]] = []
        blocks = [b for b in content if isinstance(b, dict)]
        for n, b in enumerate(blocks):
            if b.get("type") == "text":
                text.append(str(b.get("text", "")))
            elif b.get("type") == "tool_use":
                call = ToolCall(
                    str(b.get("id") or ""),
                    str(b.get("name") or ""),
                    parse_arguments(b.get("input")),
                )
                # cut by a token limit, the last block is the unfinished one
                calls.append((call, n < len(blocks) - 1))
        finish = str(data.get("stop_reason") or "")
        whole, kept, _ = drop_cut_calls("".join(text), calls, finish)
        return Completion(
            text=whole,
            tool_calls=fix_tool_calls(kept, (t.name for t in request.tools)),
            usage=normalize_usage(data.get("usage")),
            model=str(data.get("model") or request.model or self.config.model),
            finish_reason=finish,
            provider=self.name,
        )

    async def complete(self, request: CompletionRequest) -> Completion:
        data = await self.post_json("messages", self.build_body(request, stream=False))
        return self.parse_completion(data, request)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        body = self.build_body(request, stream=True)
        text: list[str] = []
        blocks: dict[int, dict[str, str]] = {}  # index -> tool_use id, name, json so far
        closed: set[int] = set()  # indexes of blocks that got their content_block_stop
        usage: dict[str, Any] = {}
        model = str(body["model"])
        finish = ""
        stopped = False
        async with self.sse("messages", body) as events:
            try:
                async for event in events:
                    if not event.data.strip() or event.data.strip() == "[DONE]":
                        continue  # "[DONE]": a compatible proxy's OpenAI-style end
                    try:
                        data = orjson.loads(event.data)
                    except orjson.JSONDecodeError:
                        bad = f"{self.name}: a stream event is not JSON"
                        raise InvalidResponse(bad) from None
                    if not isinstance(data, dict):
                        continue
                    kind = data.get("type") or event.event
                    if kind == "error":
                        raise self._error_event(data.get("error"))
                    if kind == "message_start":
                        msg = data.get("message") or {}
                        model = str(msg.get("model") or model)
                        merge_usage(usage, msg.get("usage"))
                    elif kind == "content_block_start":
                        block = data.get("content_block") or {}
                        if block.get("type") == "tool_use":
                            blocks[int(data.get("index", len(blocks)))] = {
                                "id": str(block.get("id") or ""),
                                "name": str(block.get("name") or ""),
                                "json": "",
                            }
                        elif block.get("type") == "text" and block.get("text"):
                            text.append(block["text"])
                            yield TextDelta(block["text"])
                    elif kind == "content_block_delta":
                        delta = data.get("delta") or {}
                        if delta.get("type") == "text_delta" and delta.get("text"):
                            text.append(delta["text"])
                            yield TextDelta(delta["text"])
                        elif delta.get("type") == "input_json_delta":
                            slot = blocks.get(int(data.get("index", -1)))
                            if slot is not None:
                                slot["json"] += str(delta.get("partial_json") or "")
                    elif kind == "content_block_stop":
                        closed.add(int(data.get("index", -1)))
                    elif kind == "message_delta":
                        finish = str((data.get("delta") or {}).get("stop_reason") or finish)
                        merge_usage(usage, data.get("usage"))
                    elif kind == "message_stop":
                        stopped = True
                        break
            except (InvalidResponse, Timeout):
                # the connection dropped (or went silent) after the message_delta that
                # carries the stop_reason and the final usage: only message_stop is
                # missing, and the answer is whole (as OpenAI's is at its finish_reason)
                if not finish:
                    raise
                log.info("%s: the stream ended after its stop_reason; answer kept", self.name)
            if stopped:  # the answer is whole, whatever the connection does now
                await self.drain(events)
        if not stopped and not finish:
            raise InvalidResponse(f"{self.name}: the stream ended before the answer was complete")
        # a block that got its content_block_stop with no input_json_delta is a
        # whole call without arguments ({}), even in an answer cut by max_tokens
        calls = [
            (
                ToolCall(b["id"], b["name"], parse_arguments(b["json"])),
                arguments_complete(b["json"]) or (n in closed and not b["json"].strip()),
            )
            for n, b in sorted(blocks.items())
        ]
        whole, kept, note = drop_cut_calls("".join(text), calls, finish)
        if note:
            yield TextDelta(note)
        yield Completion(
            text=whole,
            tool_calls=fix_tool_calls(kept, (t.name for t in request.tools)),
            usage=normalize_usage(usage),
            model=model,
            finish_reason=finish,
            provider=self.name,
        )
