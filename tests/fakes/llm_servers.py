"""Fake LLM servers on 127.0.0.1 that speak the real wire formats.

:class:`FakeLLMServer` is one aiohttp app serving both dialects:

* OpenAI: ``POST /v1/chat/completions`` (JSON or SSE), ``GET /v1/models``
* Anthropic: ``POST /v1/messages`` (JSON or SSE), ``GET /v1/models``

By default it answers every request with ``echo: <last user text>`` in the
format asked for (streaming when the body says ``"stream": true``).  Tests
script exact replies with :meth:`FakeLLMServer.push` — status, headers, a JSON
body, raw bytes (malformed JSON), SSE events, latency before the answer and
between events, a body kept open after its events, and a connection cut
mid-stream.  Every request is recorded
(``server.requests``).  Anthropic requests the real API would refuse (a blank
text block, a malformed or repeated tool id, a ``tool_result`` without its
``tool_use`` or a second one, more than 4 ``cache_control`` breakpoints, an
unknown cache type) get its 400 instead, and so do OpenAI requests whose history
the real API refuses (a ``tool`` message answering no call just before it, a call
left unanswered, a function name outside ``^[a-zA-Z0-9_-]+$``, a call id over 40
characters; see :func:`openai_request_problem`); ``validate=False`` turns that off.  Anthropic answers that do not
script their usage (the echo, ``anthropic_text`` / ``anthropic_stream``
without usage) report the input the way the real API splits it, from a
simulated prompt cache (``server.prompt_cache``, see ``anthropic_cache``;
``cache_min_tokens`` lowers the models' minimum cacheable prefix for tests).
Usable from unit tests, integration tests and benchmarks::

    async with FakeLLMServer() as server:
        server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=2))
        settings = LLMSettings(llm_backend="openai_compatible", llm_base_url=server.openai_url, ...)
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

from tests.fakes.anthropic_cache import PromptCache, cache_control_problem, with_usage


@dataclass
class Reply:
    """One scripted answer."""

    status: int = 200
    json: Any = None  # a JSON body
    body: bytes | None = None  # raw bytes instead (e.g. malformed JSON)
    headers: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, Any]] | None = None  # SSE (event name or "", data) pairs
    delay: float = 0.0  # seconds before the status line
    event_delay: float = 0.0  # seconds between SSE events
    cut: bool = False  # drop the connection after the events, mid-body
    linger: float = 0.0  # seconds to keep the body open after the events (then end or cut it)
    # Anthropic: the server fills in input_tokens / cache_read_input_tokens /
    # cache_creation_input_tokens from the request and its prompt cache
    measure: bool = False


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


# --- wire-format builders ------------------------------------------------------
def openai_text(
    text: str, *, model: str = "gpt-4o", usage: dict[str, Any] | None = None, finish: str = "stop"
) -> Reply:
    return Reply(
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
            ],
            "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )


def openai_tool_calls(
    calls: Iterable[tuple[str, str, dict[str, Any]]], model: str = "gpt-4o"
) -> Reply:
    """``calls`` as (id, name, arguments); an empty id is sent as a missing id."""
    tool_calls = []
    for cid, name, args in calls:
        tc: dict[str, Any] = {
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        if cid:
            tc["id"] = cid
        tool_calls.append(tc)
    return Reply(
        json={
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "tool_calls": tool_calls},
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 8},
        }
    )


def openai_stream(
    pieces: Iterable[str],
    *,
    tool_calls: Iterable[tuple[str, str, str]] = (),
    model: str = "gpt-4o",
    usage: dict[str, Any] | None = None,
    done: bool = True,
    event_delay: float = 0.0,
    cut: bool = False,
) -> Reply:
    """SSE chunks: one per text piece, tool calls (id, name, args JSON) split in
    two argument fragments each, a finish chunk, a usage chunk, ``[DONE]``."""
    events: list[tuple[str, Any]] = []
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model}
    events.append(("", {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
    for p in pieces:
        events.append(("", {**base, "choices": [{"index": 0, "delta": {"content": p}}]}))
    calls = list(tool_calls)
    for i, (cid, name, args) in enumerate(calls):
        half = len(args) // 2
        first = {
            "index": i,
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": args[:half]},
        }
        second = {"index": i, "function": {"arguments": args[half:]}}
        for tc in (first, second):
            events.append(("", {**base, "choices": [{"index": 0, "delta": {"tool_calls": [tc]}}]}))
    if not cut:
        finish = "tool_calls" if calls else "stop"
        if done:
            events.append(
                ("", {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
            )
            events.append(
                (
                    "",
                    {
                        **base,
                        "choices": [],
                        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5},
                    },
                )
            )
            events.append(("", "[DONE]"))
    return Reply(events=events, event_delay=event_delay, cut=cut)


def openai_error(
    status: int, code: str, message: str, *, retry_after: float | None = None, kind: str = ""
) -> Reply:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    body = {"error": {"message": message, "type": kind or "invalid_request_error", "code": code}}
    return Reply(status=status, json=body, headers=headers)


def anthropic_text(
    text: str,
    *,
    model: str = "claude-sonnet-4-20250514",
    usage: dict[str, Any] | None = None,
    tool_uses: Iterable[tuple[str, str, dict[str, Any]]] = (),
) -> Reply:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    uses = list(tool_uses)
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in uses]
    return Reply(
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if uses else "end_turn",
            "stop_sequence": None,
            "usage": usage or {"input_tokens": 10, "output_tokens": 5},
        },
        measure=usage is None,
    )


def anthropic_stream(
    pieces: Iterable[str],
    *,
    tool_uses: Iterable[tuple[str, str, str]] = (),
    model: str = "claude-sonnet-4-20250514",
    input_tokens: int | None = None,
    output_tokens: int = 5,
    cache_read: int = 0,
    stop: bool = True,
    event_delay: float = 0.0,
    cut: bool = False,
) -> Reply:
    """The real event sequence; tool uses (id, name, input JSON) as input_json_delta.

    Without ``input_tokens`` the server measures the input usage from the request
    (and its prompt cache), as the real API reports it."""
    ev: list[tuple[str, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "usage": {
                        "input_tokens": 10 if input_tokens is None else input_tokens,
                        "output_tokens": 1,
                        "cache_read_input_tokens": cache_read,
                        "cache_creation_input_tokens": 0,
                    },
                },
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    index = 0
    texts = list(pieces)
    if texts:
        ev.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        for p in texts:
            ev.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": p},
                    },
                )
            )
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    uses = list(tool_uses)
    for tid, name, args in uses:
        ev.append(
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": tid, "name": name, "input": {}},
                },
            )
        )
        half = len(args) // 2
        for frag in (args[:half], args[half:]):
            ev.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": frag},
                    },
                )
            )
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    if not cut and stop:
        ev.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": "tool_use" if uses else "end_turn",
                        "stop_sequence": None,
                    },
                    "usage": {"output_tokens": output_tokens},
                },
            )
        )
        ev.append(("message_stop", {"type": "message_stop"}))
    return Reply(events=ev, event_delay=event_delay, cut=cut, measure=input_tokens is None)


def anthropic_error(
    status: int, kind: str, message: str, *, retry_after: float | None = None
) -> Reply:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    return Reply(
        status=status,
        json={"type": "error", "error": {"type": kind, "message": message}},
        headers=headers,
    )


def models_reply(payload: Any) -> Reply:
    return Reply(json=payload)


# --- the server -------------------------------------------------------------------
def _last_user(body: Any) -> str:
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return "".join(b.get("text", "") for b in c if isinstance(b, dict))
    return ""


ANTHROPIC_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")


def anthropic_request_problem(body: Any) -> str:
    """What the real Messages API would reject in ``body`` (its 400 message), or "".

    Checked: ``cache_control`` (see ``anthropic_cache.cache_control_problem``), no
    empty message, no blank text block, tool ids of the allowed characters, unique
    ``tool_use`` ids in the whole request, one ``tool_result`` per ``tool_use``,
    every ``tool_result`` answering a ``tool_use`` of the message just before it,
    and every ``tool_use`` answered in the next message.
    """
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return "messages: Field required"
    cache_problem = cache_control_problem(body)
    if cache_problem:
        return cache_problem
    use_ids: set[str] = set()
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        last_answer = i == len(messages) - 1 and m.get("role") == "assistant"
        if not isinstance(content, list) or (not content and not last_answer):
            return (
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        for j, b in enumerate(content):
            where = f"messages.{i}.content.{j}"
            kind = b.get("type") if isinstance(b, dict) else None
            texts = [b] if kind == "text" else []
            if kind == "tool_result" and isinstance(b.get("content"), list):
                texts = [t for t in b["content"] if isinstance(t, dict) and t.get("type") == "text"]
            if any(not str(t.get("text", "")).strip() for t in texts):
                return "messages: text content blocks must contain non-whitespace text"
            if kind in ("tool_use", "tool_result"):
                key = "id" if kind == "tool_use" else "tool_use_id"
                if not ANTHROPIC_TOOL_ID.fullmatch(str(b.get(key, ""))):
                    return f"{where}.{kind}.{key}: String should match pattern '^[a-zA-Z0-9_-]+$'"
            if kind == "tool_use":
                if b["id"] in use_ids:
                    return f"{where}: `tool_use` ids must be unique"
                use_ids.add(b["id"])
        results = [
            str(b.get("tool_use_id"))
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        twice = [r for n, r in enumerate(results) if r in results[:n]]
        if twice:
            return (
                f"messages.{i}.content.{results.index(twice[0])}: each tool_use must have a "
                f"single result. Found multiple `tool_result` blocks with id: {twice[0]}"
            )

    def ids(m: Any, kind: str, key: str) -> list[str]:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            return []
        return [str(b.get(key)) for b in content if isinstance(b, dict) and b.get("type") == kind]

    for i, m in enumerate(messages):
        before = set(ids(messages[i - 1], "tool_use", "id")) if i else set()
        stray = [r for r in ids(m, "tool_result", "tool_use_id") if r not in before]
        if stray:
            return (
                f"messages.{i}.content.0: unexpected `tool_use_id` found in `tool_result` "
                f"blocks: {stray[0]}. Each `tool_result` block must have a corresponding "
                "`tool_use` block in the previous message."
            )
        if i + 1 < len(messages):
            answered = set(ids(messages[i + 1], "tool_result", "tool_use_id"))
            missing = [u for u in ids(m, "tool_use", "id") if u not in answered]
            if missing:
                return (
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {missing[0]}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
    return ""


OPENAI_FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
OPENAI_ID_LIMIT = 40


def openai_request_problem(body: Any) -> str:
    """What the real chat completions API would reject in ``body``'s history (its
    400 message), or "".

    Checked: a ``tool_calls`` function name matches ``^[a-zA-Z0-9_-]+$`` (64 at
    most), a tool call id has at most 40 characters, a ``tool`` message answers a
    call of the assistant message before it (only tool messages between) and
    only once, and every call is answered before the next message that is not a
    tool result.
    """
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return "Missing required parameter: 'messages'."
    open_ids: list[str] = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if open_ids and role != "tool":
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {open_ids[0]}"
            )
        if role == "assistant" and m.get("tool_calls"):
            for j, tc in enumerate(m["tool_calls"]):
                name = str((tc.get("function") or {}).get("name", ""))
                if not OPENAI_FUNCTION_NAME.fullmatch(name):
                    return (
                        f"Invalid 'messages[{i}].tool_calls[{j}].function.name': string does "
                        "not match pattern. Expected a string that matches the pattern "
                        "'^[a-zA-Z0-9_-]+$'."
                    )
                cid = str(tc.get("id", ""))
                if len(cid) > OPENAI_ID_LIMIT:
                    return (
                        f"Invalid 'messages[{i}].tool_calls[{j}].id': string too long. Expected "
                        f"a string with maximum length {OPENAI_ID_LIMIT}, but got a string with "
                        f"length {len(cid)} instead."
                    )
            open_ids = [str(tc.get("id", "")) for tc in m["tool_calls"]]
        elif role == "tool":
            tid = str(m.get("tool_call_id", ""))
            if tid not in open_ids:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            open_ids.remove(tid)
    return ""


def default_reply(path: str, body: Any) -> Reply:
    """The echo answer in the dialect of ``path``."""
    if path.endswith("/models"):
        return Reply(json={"object": "list", "data": [{"id": "gpt-4o"}, {"id": "fake-model"}]})
    text = "echo: " + _last_user(body)
    model = str(body.get("model") or "fake-model")
    stream = bool(body.get("stream"))
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1].rstrip()
    if path.endswith("/messages"):
        return anthropic_stream(words, model=model) if stream else anthropic_text(text, model=model)
    return openai_stream(words, model=model) if stream else openai_text(text, model=model)


class FakeLLMServer:
    """A real HTTP server on 127.0.0.1 (random free port) with scripted replies."""

    def __init__(
        self, *, latency: float = 0.0, validate: bool = True, cache_min_tokens: int | None = None
    ) -> None:
        self.latency = latency  # added before every reply
        # answer an Anthropic request the real API would reject with its 400
        # (see anthropic_request_problem), before any scripted reply
        self.validate = validate
        # what Anthropic's prompt cache holds; None: each model's real minimum length
        self.prompt_cache = PromptCache(cache_min_tokens)
        self.script: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.responder: Callable[[str, Any], Reply] = default_reply
        self._runner: web.AppRunner | None = None
        self.port = 0

    # scripting
    def push(self, *replies: Reply) -> None:
        self.script.extend(replies)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """The base URL an OpenAI-compatible client wants (with /v1)."""
        return self.url + "/v1"

    # lifecycle
    async def start(self) -> FakeLLMServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # stop() does not wait out replies held back on purpose (``delay``) for
        # clients that are gone (aiohttp's default would wait 60 s for them)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=2.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLLMServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # serving
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.requests.append(Recorded(request.method, request.path, dict(request.headers), body))
        if self.validate and request.method == "POST" and request.path.endswith("/messages"):
            problem = anthropic_request_problem(body)
            if problem:
                return web.json_response(
                    {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": problem},
                    },
                    status=400,
                )
        if (
            self.validate
            and request.method == "POST"
            and request.path.endswith("/chat/completions")
        ):
            problem = openai_request_problem(body)
            if problem:
                return web.json_response(
                    {
                        "error": {
                            "message": problem,
                            "type": "invalid_request_error",
                            "param": None,
                            "code": None,
                        }
                    },
                    status=400,
                )
        reply = (
            self.script.popleft()
            if self.script
            else self.responder(request.path, body if isinstance(body, dict) else {})
        )
        if (
            reply.measure
            and reply.status == 200
            and request.path.endswith("/messages")
            and isinstance(body, dict)
        ):
            usage = self.prompt_cache.account(body)
            if reply.events is not None:
                reply = replace(reply, events=with_usage(reply.events, usage))
            elif reply.json is not None:
                reply = replace(reply, json=with_usage(reply.json, usage))
        delay = self.latency + reply.delay
        if delay:
            await asyncio.sleep(delay)
        if reply.events is None:
            if reply.body is not None:
                return web.Response(
                    status=reply.status,
                    body=reply.body,
                    headers=reply.headers,
                    content_type="application/json",
                )
            return web.json_response(reply.json, status=reply.status, headers=reply.headers)
        resp = web.StreamResponse(
            status=reply.status, headers={"content-type": "text/event-stream", **reply.headers}
        )
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for name, data in reply.events:
            payload = data if isinstance(data, str) else json.dumps(data)
            frame = (f"event: {name}\n" if name else "") + f"data: {payload}\n\n"
            await resp.write(frame.encode())
            if reply.event_delay:
                await asyncio.sleep(reply.event_delay)
        if reply.linger:  # until then, or until the client hangs up
            end = asyncio.get_running_loop().time() + reply.linger
            while asyncio.get_running_loop().time() < end:
                if request.transport is None or request.transport.is_closing():
                    return resp
                await asyncio.sleep(0.05)
        if reply.cut:
            assert request.transport is not None
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp


# --- an in-process provider for wrapper tests --------------------------------------
class ScriptedProvider:
    """An LLMProvider whose answers are scripted: Completions, exceptions, or streams.

    ``outcomes`` items: a ``Completion`` (returned / streamed as one delta plus
    itself), an exception (raised), or a list of stream items (TextDelta /
    Completion / exception, yielded or raised in order).  When the script runs
    out, ``default`` text is answered.  ``calls`` records every request.
    """

    def __init__(self, name: str = "scripted:model", *outcomes: Any, default: str = "ok") -> None:
        from agent_core.llm.base import ModelInfo

        self._name = name
        self.outcomes: deque[Any] = deque(outcomes)
        self.default = default
        self.calls: list[Any] = []
        self.initialized = False
        self.info = ModelInfo(name=name.rsplit(":", 1)[-1])

    @property
    def name(self) -> str:
        return self._name

    async def initialize(self) -> None:
        self.initialized = True

    async def shutdown(self) -> None:
        self.initialized = False

    def model_info(self, model: str | None = None) -> Any:
        from dataclasses import replace

        return replace(self.info, name=model) if model else self.info

    async def list_models(self) -> list[str]:
        return [self.info.name]

    def _next(self) -> Any:
        from agent_core.llm.base import Completion

        if self.outcomes:
            return self.outcomes.popleft()
        return Completion(self.default, provider=self._name)

    async def complete(self, request: Any) -> Any:
        from agent_core.llm.base import Completion

        self.calls.append(request)
        out = self._next()
        if isinstance(out, BaseException):
            raise out
        if isinstance(out, list):
            final = [o for o in out if isinstance(o, Completion)]
            errors = [o for o in out if isinstance(o, BaseException)]
            if errors:
                raise errors[0]
            return final[-1]
        return out

    async def stream(self, request: Any) -> Any:
        from agent_core.llm.base import Completion, TextDelta

        self.calls.append(request)
        out = self._next()
        if isinstance(out, BaseException):
            raise out
        items = out if isinstance(out, list) else [TextDelta(out.text), out]
        for item in items:
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, TextDelta | Completion)
            yield item


class FakeClock:
    """A monotonic clock and an async sleep that only advance time."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
