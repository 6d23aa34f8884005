"""OpenAI chat completions (also every OpenAI-compatible server).

Used for ``openai``, ``openai_compatible``, the presets (OpenRouter, Groq ...)
and, through :mod:`agent_core.llm.ollama`, Ollama's ``/v1`` endpoint.
Native tools (strict-mode schemas on api.openai.com), images as ``image_url``
data URLs, SSE streaming with tool-call deltas assembled into whole calls.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson

from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    StreamItem,
    TextDelta,
    ToolCall,
)
from agent_core.llm.errors import InvalidResponse, Timeout
from agent_core.llm.http import HTTPBackend, status_error
from agent_core.llm.schema import (
    OPENAI_ID_LIMIT,
    arguments_complete,
    drop_cut_calls,
    fix_tool_calls,
    flatten_tools,
    merge_user_runs,
    parse_arguments,
    safe_tool_name,
    strict_expressible,
    strict_schema,
    wire_history,
)
from agent_core.llm.usage import normalize_usage

NO_VISION_NOTE = "[an image was attached, but this model cannot see images]"

log = logging.getLogger(__name__)


def _text_of(content: Any) -> str:
    """Message content as text: a string, or the text (and refusal) parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get(p["type"]) or "")
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "refusal")
        )
    return ""


def _answer_of(message: dict[str, Any]) -> str:
    """The text of a message or a stream delta: its content, or the model's
    refusal (``refusal``, sent instead of content), which the user must see."""
    refusal = message.get("refusal")
    return _text_of(message.get("content")) + (refusal if isinstance(refusal, str) else "")


class OpenAIProvider(HTTPBackend):
    """Chat completions over ``{base_url}/chat/completions``."""

    def headers(self) -> dict[str, str]:
        h = super().headers()
        if self.config.api_key:
            h["authorization"] = f"Bearer {self.config.api_key}"
        return h

    # --- request -----------------------------------------------------------
    def _message(self, m: ChatMessage, vision: bool) -> dict[str, Any]:
        if m.role == "tool":
            return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
        if m.role == "assistant" and m.tool_calls:
            return {
                "role": "assistant",
                "content": m.content or None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": safe_tool_name(c.name),
                            "arguments": orjson.dumps(c.arguments).decode(),
                        },
                    }
                    for c in m.tool_calls
                ],
            }
        if m.images and m.role == "user":
            if not vision:
                notes = "\n".join([NO_VISION_NOTE] * len(m.images))
                return {"role": "user", "content": f"{m.content}\n{notes}".strip()}
            parts: list[dict[str, Any]] = []
            if m.content:
                parts.append({"type": "text", "text": m.content})
            for img in m.images:
                url = f"data:{img.mime};base64,{img.data_b64}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
            return {"role": "user", "content": parts}
        return {"role": m.role, "content": m.content}

    def build_body(self, request: CompletionRequest, *, stream: bool) -> dict[str, Any]:
        model = request.model or self.config.model
        info = self.model_info(model)
        use_tools = bool(request.tools) and info.supports_tools and not self.config.flatten_tools
        # a stored history repaired as the API needs it (schema.wire_history), and
        # consecutive user messages (left by a failed call) joined for templates
        # that require roles to alternate; OpenAI itself accepts either
        history = wire_history(request.messages, id_limit=OPENAI_ID_LIMIT)
        messages = merge_user_runs(history if use_tools else flatten_tools(history))
        body: dict[str, Any] = {
            "model": model,
            "messages": [self._message(m, info.supports_vision) for m in messages],
        }
        if request.max_tokens is not None:
            key = "max_completion_tokens" if self.config.backend == "openai" else "max_tokens"
            body[key] = request.max_tokens
        # OpenAI's reasoning models answer 400 to any temperature but 1, and to stop
        sampling = not (info.reasoning and self.config.backend == "openai")
        if request.temperature is not None and sampling:
            body["temperature"] = request.temperature
        if request.stop and sampling:
            body["stop"] = list(request.stop)
        if request.reasoning_effort and info.reasoning and self.config.backend == "openai":
            body["reasoning_effort"] = request.reasoning_effort
        if use_tools:
            tools = []
            for t in request.tools:
                fn: dict[str, Any] = {"name": t.name, "description": t.description}
                if self.config.strict_tools and strict_expressible(t.parameters):
                    fn["parameters"] = strict_schema(t.parameters)
                    fn["strict"] = True
                else:
                    fn["parameters"] = t.parameters
                tools.append({"type": "function", "function": fn})
            body["tools"] = tools
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    # --- answer ------------------------------------------------------------
    def parse_completion(self, data: Any, request: CompletionRequest) -> Completion:
        if not isinstance(data, dict):
            raise InvalidResponse(f"{self.name}: the answer is not a JSON object")
        if data.get("error"):
            raise self._body_error(data["error"])
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise InvalidResponse(f"{self.name}: the answer has no choices")
        msg = choices[0].get("message")
        msg = msg if isinstance(msg, dict) else {}
        finish = str(choices[0].get("finish_reason") or "")
        calls = []
        for tc in msg.get("tool_calls") or ():
            fn = tc.get("function") or {}
            raw = fn.get("arguments")
            call = ToolCall(tc.get("id") or "", fn.get("name") or "", parse_arguments(raw))
            calls.append((call, arguments_complete(raw)))
        text, kept, _ = drop_cut_calls(_answer_of(msg), calls, finish)
        return Completion(
            text=text,
            tool_calls=fix_tool_calls(kept, (t.name for t in request.tools)),
            usage=normalize_usage(data.get("usage")),
            model=str(data.get("model") or request.model or self.config.model),
            finish_reason=finish,
            provider=self.name,
        )

    def _body_error(self, err: Any) -> Exception:
        """An error object inside a 200 answer or a stream chunk."""
        code = err.get("code") if isinstance(err, dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 500
        body = orjson.dumps({"error": err})
        return status_error(self.name, status, body, {}, self._secrets)

    async def complete(self, request: CompletionRequest) -> Completion:
        data = await self.post_json("chat/completions", self.build_body(request, stream=False))
        return self.parse_completion(data, request)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        body = self.build_body(request, stream=True)
        text: list[str] = []
        calls = _Calls()
        usage: dict[str, Any] | None = None
        model = str(body["model"])
        finish = ""
        done = False
        async with self.sse("chat/completions", body) as events:
            try:
                async for event in events:
                    if event.data.strip() == "[DONE]":
                        done = True
                        break
                    if not event.data.strip():
                        continue
                    try:
                        chunk = orjson.loads(event.data)
                    except orjson.JSONDecodeError:
                        bad = f"{self.name}: a stream chunk is not JSON"
                        raise InvalidResponse(bad) from None
                    if not isinstance(chunk, dict):
                        continue
                    if chunk.get("error"):
                        raise self._body_error(chunk["error"])
                    model = str(chunk.get("model") or model)
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        piece = _answer_of(delta)
                        if piece:
                            text.append(piece)
                            yield TextDelta(piece)
                        for tc in delta.get("tool_calls") or ():
                            if isinstance(tc, dict):
                                calls.merge(tc)
                        if choice.get("finish_reason"):
                            finish = str(choice["finish_reason"])
            except (InvalidResponse, Timeout):
                # the connection dropped (or went silent) after the finish_reason: the
                # answer is whole, only the usage chunk and [DONE] are missing
                if not finish:
                    raise
                log.info("%s: the stream ended after its finish_reason; answer kept", self.name)
            if done:  # the answer is whole, whatever the connection does now
                await self.drain(events)
        if not done and not finish:
            raise InvalidResponse(f"{self.name}: the stream ended before the answer was complete")
        assembled = [
            (
                ToolCall(c["id"], c["name"], parse_arguments(c["args"])),
                arguments_complete(c["args"]),
            )
            for c in calls.assembled()
        ]
        whole, kept, note = drop_cut_calls("".join(text), assembled, finish)
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


class _Calls:
    """Tool calls assembled from streamed deltas.

    A delta names its call by ``index``.  Some servers (Ollama's ``/v1``) send
    parallel calls whole, one per chunk, every one with index 0 and its own id:
    a delta bringing a function name and a different id to a slot that already
    has an id and whole JSON arguments, or a name of another function, opens a
    new slot; later deltas of that index continue the newest.  A different id
    alone does not: a few servers change the id between the fragments of one
    call.  A delta without an index continues the newest call unless it brings an
    id or a name of its own (a server that sends no index, fragments and all).
    """

    def __init__(self) -> None:
        self._slots: list[tuple[int, dict[str, str]]] = []  # (server index, call)
        self._current: dict[int, dict[str, str]] = {}  # server index -> its open slot

    def merge(self, tc: dict[str, Any]) -> None:
        """Fold one streamed tool-call delta into the calls assembled so far."""
        index = tc.get("index")
        cid = str(tc.get("id") or "")
        fn = tc.get("function") or {}
        name = fn.get("name")
        if not isinstance(index, int):
            last = self._slots[-1] if self._slots else None
            if last is not None and (not (cid or name) or cid == last[1]["id"]):
                index = last[0]  # a fragment of the newest call
            else:
                index = max((i for i, _ in self._slots), default=-1) + 1
        slot = self._current.get(index)
        if slot is None or (
            cid
            and name
            and slot["id"]
            and cid != slot["id"]
            and (arguments_complete(slot["args"]) or not _same_function(slot["name"], name))
        ):
            slot = self._current[index] = {"id": "", "name": "", "args": ""}
            self._slots.append((index, slot))
        if cid:
            slot["id"] = cid
        if name:
            # most servers send the name once; a few repeat it whole in every chunk
            if not slot["name"] or name.startswith(slot["name"]):
                slot["name"] = name
            else:
                slot["name"] += name
        args = fn.get("arguments")
        if isinstance(args, dict):
            slot["args"] = orjson.dumps(args).decode()
        elif args:
            slot["args"] += args

    def assembled(self) -> list[dict[str, str]]:
        """The calls in index order (calls sharing an index in arrival order)."""
        order = sorted(range(len(self._slots)), key=lambda n: (self._slots[n][0], n))
        return [self._slots[n][1] for n in order]


def _same_function(have: str, name: str) -> bool:
    """Whether ``name`` (a delta's, with a new id) can be ``have``'s call going on:
    the same name repeated whole, or one of them a prefix of the other; a name of
    another function (``clock`` then ``search``) cannot.  (A name streamed in
    pieces never comes with a new id, which is the only case this is asked.)"""
    return not have or name.startswith(have) or have.startswith(name)
