"""Wire cases the real APIs and servers produce that the backends must get right:
context-limit errors, parallel tool calls sharing an index, blank text blocks,
foreign tool ids, answers cut inside a tool call, reasoning models, Ollama's
real context window, and the usage of an escalated smart-routing answer."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agent_core.llm.anthropic import EMPTY_MESSAGE, AnthropicProvider, tool_id
from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    StreamItem,
    TextDelta,
    TokenUsage,
    ToolCall,
    ToolSpec,
)
from agent_core.llm.errors import BadRequest, ContextLengthExceeded
from agent_core.llm.ollama import OllamaProvider
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from agent_core.llm.routing import HOLD_CHARS, SmartRouting
from agent_core.llm.settings import LLMSettings
from tests.fakes.llm_servers import (
    FakeLLMServer,
    Reply,
    ScriptedProvider,
    anthropic_error,
    anthropic_request_problem,
    anthropic_stream,
    anthropic_text,
    openai_request_problem,
    openai_text,
)
from tests.unit.llm.conftest import config_for

SEARCH = ToolSpec("search", "search", {"type": "object", "properties": {"q": {"type": "string"}}})
WRITE = ToolSpec(
    "write_file",
    "write a file",
    {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
)
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
MODERATE = "Tell me about the history of the city I live in. " * 6  # 300 chars


async def _anthropic(server: FakeLLMServer) -> AnthropicProvider:
    p = AnthropicProvider(config_for(server, "anthropic"), PriceTable())
    await p.initialize()
    return p


async def _items(p: Any, request: CompletionRequest) -> list[StreamItem]:
    try:
        return [i async for i in p.stream(request)]
    finally:
        await p.shutdown()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str, dict[str, Any]]:
    choice: dict[str, Any] = {"index": 0, "delta": delta}
    if finish:
        choice["finish_reason"] = finish
    return ("", {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]})


def _call_delta(**tc: Any) -> tuple[str, dict[str, Any]]:
    return _chunk({"tool_calls": [tc]})


# --- 1. Anthropic "prompt + max_tokens > window" ------------------------------------
async def test_anthropic_input_plus_max_tokens_over_limit_is_context_length(
    server: FakeLLMServer,
) -> None:
    """Claude 3.7+/4 answer 400 invalid_request_error with this text when the prompt
    plus max_tokens does not fit: it is ContextLengthExceeded, so the turn compacts
    and retries."""
    server.push(
        anthropic_error(
            400,
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: 197000 + 4096 > 200000, "
            "decrease input length or `max_tokens` and try again",
        )
    )
    p = await _anthropic(server)
    try:
        with pytest.raises(ContextLengthExceeded):
            await p.complete(CompletionRequest((ChatMessage("user", "hi"),)))
    finally:
        await p.shutdown()


# --- 2. parallel tool calls streamed all with index 0 ---------------------------------
async def test_ollama_parallel_tool_calls_reusing_index_zero_stay_separate(
    server: FakeLLMServer,
) -> None:
    """Ollama's /v1 stream sends every parallel tool call whole, each in its own chunk,
    each with ``index: 0`` and its own id: they stay separate calls."""
    server.push(
        Reply(
            events=[
                _chunk({"role": "assistant", "content": ""}),
                _call_delta(
                    id="call_aaa",
                    index=0,
                    type="function",
                    function={"name": "search", "arguments": '{"q":"a"}'},
                ),
                _call_delta(
                    id="call_bbb",
                    index=0,
                    type="function",
                    function={"name": "search", "arguments": '{"q":"b"}'},
                ),
                _chunk({}, "tool_calls"),
                ("", "[DONE]"),
            ]
        )
    )
    p = OllamaProvider(config_for(server, "ollama"), PriceTable())
    await p.initialize()
    items = await _items(p, CompletionRequest((ChatMessage("user", "a and b"),), tools=(SEARCH,)))
    final = items[-1]
    assert isinstance(final, Completion)
    assert final.tool_calls == (
        ToolCall("call_aaa", "search", {"q": "a"}),
        ToolCall("call_bbb", "search", {"q": "b"}),
    )


async def test_parallel_calls_at_index_zero_the_first_with_no_arguments_stay_separate(
    server: FakeLLMServer,
) -> None:
    """A no-argument call sent as ``arguments: ""`` (not ``{}``) is not whole JSON, so
    the next call at index 0 was folded into it: one call to ``clocksearch``."""
    clock = ToolSpec("clock", "time", {"type": "object", "properties": {}})
    server.push(
        Reply(
            events=[
                _chunk({"role": "assistant", "content": ""}),
                _call_delta(
                    id="call_a",
                    index=0,
                    type="function",
                    function={"name": "clock", "arguments": ""},
                ),
                _call_delta(
                    id="call_b",
                    index=0,
                    type="function",
                    function={"name": "search", "arguments": '{"q":"x"}'},
                ),
                _chunk({}, "tool_calls"),
                ("", "[DONE]"),
            ]
        )
    )
    p = OllamaProvider(config_for(server, "ollama"), PriceTable())
    await p.initialize()
    req = CompletionRequest((ChatMessage("user", "time, then x"),), tools=(SEARCH, clock))
    final = (await _items(p, req))[-1]
    assert isinstance(final, Completion)
    assert final.tool_calls == (
        ToolCall("call_a", "clock", {}),
        ToolCall("call_b", "search", {"q": "x"}),
    )


async def test_a_call_streamed_in_fragments_without_index_is_one_call(
    server: FakeLLMServer,
) -> None:
    """A server that sends no ``index``: every fragment opened a call of its own (one
    with half the JSON, one with no name)."""
    server.push(
        Reply(
            events=[
                _chunk({"role": "assistant", "content": ""}),
                _chunk(
                    {
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "search", "arguments": '{"q": '},
                            }
                        ]
                    }
                ),
                _chunk({"tool_calls": [{"function": {"arguments": '"paris"}'}}]}),
                _chunk({}, "tool_calls"),
                ("", "[DONE]"),
            ]
        )
    )
    p = OllamaProvider(config_for(server, "ollama"), PriceTable())
    await p.initialize()
    req = CompletionRequest((ChatMessage("user", "paris"),), tools=(SEARCH,))
    final = (await _items(p, req))[-1]
    assert isinstance(final, Completion)
    assert final.tool_calls == (ToolCall("call_1", "search", {"q": "paris"}),)


async def test_an_id_changing_between_fragments_of_one_call_does_not_split_it(
    server: FakeLLMServer,
) -> None:
    """A few servers send one id with the name and another with the later argument
    fragments of the same call: still one call."""
    server.push(
        Reply(
            events=[
                _call_delta(
                    id="call_1", index=0, function={"name": "search", "arguments": '{"q":'}
                ),
                _call_delta(id="call_2", index=0, function={"arguments": ' "x"}'}),
                _chunk({}, "tool_calls"),
                ("", "[DONE]"),
            ]
        )
    )
    p = OpenAIProvider(config_for(server, "compatible"), PriceTable())
    await p.initialize()
    items = await _items(p, CompletionRequest((ChatMessage("user", "x"),), tools=(SEARCH,)))
    final = items[-1]
    assert isinstance(final, Completion)
    assert [(c.name, c.arguments) for c in final.tool_calls] == [("search", {"q": "x"})]


# --- 3. Anthropic: no whitespace-only text blocks -------------------------------------
async def test_anthropic_never_sends_whitespace_only_text_blocks(server: FakeLLMServer) -> None:
    """The Messages API rejects any text block that is empty or whitespace only.
    Models behind OpenAI-compatible servers often return "\\n\\n" beside tool calls
    and a user can send " ": such history never produces a blank block, and a blank
    user message keeps its turn with a placeholder."""
    history = (
        ChatMessage("user", "search x"),
        ChatMessage("assistant", "\n\n", (ToolCall("call_1", "search", {"q": "x"}),)),
        ChatMessage("tool", "found", tool_call_id="call_1", name="search"),
        ChatMessage("assistant", "done"),
        ChatMessage("user", " "),
    )
    p = await _anthropic(server)
    try:
        out = await p.complete(CompletionRequest(history, tools=(SEARCH,)))
    finally:
        await p.shutdown()
    assert out.text.startswith("echo: ")  # the fake server accepted it
    sent = server.requests[0].body["messages"]
    blank = [
        b
        for m in sent
        for b in m["content"]
        if b.get("type") == "text" and not str(b.get("text", "")).strip()
    ]
    assert blank == [], f"whitespace-only text blocks sent: {blank}"
    assert sent[-1]["content"][0]["text"] == EMPTY_MESSAGE
    assert sent[-1]["content"] == [
        {"type": "text", "text": EMPTY_MESSAGE, "cache_control": {"type": "ephemeral"}}
    ]


async def test_anthropic_blank_tool_output_and_system_are_not_sent_blank(
    server: FakeLLMServer,
) -> None:
    history = (
        ChatMessage("system", "  \n"),
        ChatMessage("user", "run it"),
        ChatMessage("assistant", "", (ToolCall("toolu_1", "search", {}),)),
        ChatMessage("tool", "  ", tool_call_id="toolu_1", name="search"),
    )
    p = await _anthropic(server)
    try:
        await p.complete(CompletionRequest(history, tools=(SEARCH,)))
    finally:
        await p.shutdown()
    body = server.requests[0].body
    assert "system" not in body
    assert body["messages"][-1]["content"][0]["content"] == "(no output)"


# --- 4. Anthropic: tool ids from other providers --------------------------------------
async def test_anthropic_tool_ids_match_the_required_pattern(server: FakeLLMServer) -> None:
    """Anthropic requires tool_use.id / tool_result.tool_use_id to match
    ^[a-zA-Z0-9_-]+$.  Ids made by other backends (Kimi K2 on Groq/Together/
    OpenRouter: "functions.search:0") are mapped, the same way for the call and its
    result, when a conversation fails over to Anthropic."""
    history = (
        ChatMessage("user", "search x"),
        ChatMessage("assistant", "", (ToolCall("functions.search:0", "search", {"q": "x"}),)),
        ChatMessage("tool", "found", tool_call_id="functions.search:0", name="search"),
        ChatMessage("user", "thanks, and y?"),
    )
    p = await _anthropic(server)
    try:
        await p.complete(CompletionRequest(history, tools=(SEARCH,)))
    finally:
        await p.shutdown()
    sent = server.requests[0].body["messages"]
    use_ids = [b["id"] for m in sent for b in m["content"] if b["type"] == "tool_use"]
    result_ids = [
        b["tool_use_id"] for m in sent for b in m["content"] if b["type"] == "tool_result"
    ]
    assert use_ids == result_ids  # still paired
    assert all(ANTHROPIC_ID.match(i) for i in use_ids + result_ids), use_ids


def test_tool_id_mapping_is_stable_keeps_valid_ids_and_avoids_collisions() -> None:
    assert tool_id("toolu_01AbC-x") == "toolu_01AbC-x"
    assert tool_id("call:1") == tool_id("call:1")
    assert tool_id("call:1") != tool_id("call.1")  # both "call_1" before the hash
    assert tool_id("call:1") != "call_1"
    for raw in ("functions.search:0", "", "::", "a" * 200 + ".", "ünïcode id"):
        mapped = tool_id(raw)
        assert ANTHROPIC_ID.match(mapped), (raw, mapped)
        assert len(mapped) <= 64


# --- 5. answers cut inside a tool call ------------------------------------------------
CUT_OPENAI_STREAM = [
    _chunk({"role": "assistant", "content": "Writing it now."}),
    _call_delta(
        index=0,
        id="call_w",
        type="function",
        function={"name": "write_file", "arguments": ""},
    ),
    _call_delta(index=0, function={"arguments": '{"path": "a.py", "content": "imp'}),
    _chunk({}, "length"),
    ("", "[DONE]"),
]


async def test_openai_stream_cut_by_max_tokens_does_not_yield_a_half_tool_call(
    server: FakeLLMServer,
) -> None:
    """finish_reason "length" in the middle of a tool call's arguments: the half call
    is dropped (never run with junk arguments) and the answer says it was cut."""
    server.push(Reply(events=CUT_OPENAI_STREAM))
    p = OpenAIProvider(config_for(server, "openai"), PriceTable())
    await p.initialize()
    items = await _items(p, CompletionRequest((ChatMessage("user", "write it"),), tools=(WRITE,)))
    final = items[-1]
    assert isinstance(final, Completion)
    assert final.finish_reason == "length"
    assert final.tool_calls == ()
    deltas = "".join(i.text for i in items if isinstance(i, TextDelta))
    assert deltas == final.text
    assert final.text.startswith("Writing it now.\n\n(My answer was cut off")
    assert "`write_file`" in final.text


async def test_a_whole_call_before_the_cut_one_is_kept(server: FakeLLMServer) -> None:
    server.push(
        Reply(
            events=[
                _call_delta(
                    index=0,
                    id="call_s",
                    type="function",
                    function={"name": "search", "arguments": '{"q": "x"}'},
                ),
                _call_delta(
                    index=1,
                    id="call_w",
                    type="function",
                    function={"name": "write_file", "arguments": '{"path": "a'},
                ),
                _chunk({}, "length"),
                ("", "[DONE]"),
            ]
        )
    )
    p = OpenAIProvider(config_for(server, "openai"), PriceTable())
    await p.initialize()
    items = await _items(p, CompletionRequest((ChatMessage("user", "go"),), tools=(SEARCH, WRITE)))
    final = items[-1]
    assert isinstance(final, Completion)
    assert final.tool_calls == (ToolCall("call_s", "search", {"q": "x"}),)
    assert final.text.startswith("(My answer was cut off") and "`write_file`" in final.text


async def test_openai_completion_cut_by_max_tokens_drops_the_half_call(
    server: FakeLLMServer,
) -> None:
    server.push(
        Reply(
            json={
                "model": "gpt-4o",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": "call_w",
                                    "type": "function",
                                    "function": {
                                        "name": "write_file",
                                        "arguments": '{"path": "a.py", "cont',
                                    },
                                }
                            ],
                        },
                        "finish_reason": "length",
                    }
                ],
                "usage": {"prompt_tokens": 20, "completion_tokens": 8},
            }
        )
    )
    p = OpenAIProvider(config_for(server, "openai"), PriceTable())
    await p.initialize()
    try:
        out = await p.complete(
            CompletionRequest((ChatMessage("user", "write it"),), tools=(WRITE,))
        )
    finally:
        await p.shutdown()
    assert out.tool_calls == () and out.finish_reason == "length"
    assert out.text.startswith("(My answer was cut off")


async def test_anthropic_stream_cut_by_max_tokens_does_not_yield_a_half_tool_call(
    server: FakeLLMServer,
) -> None:
    reply = anthropic_stream(
        [], tool_uses=[("toolu_1", "write_file", '{"path": "a.py", "content": "imp')]
    )
    assert reply.events is not None
    for name, data in reply.events:
        if name == "message_delta":
            data["delta"]["stop_reason"] = "max_tokens"
    server.push(reply)
    p = await _anthropic(server)
    items = await _items(p, CompletionRequest((ChatMessage("user", "write it"),), tools=(WRITE,)))
    final = items[-1]
    assert isinstance(final, Completion) and final.finish_reason == "max_tokens"
    assert final.tool_calls == ()
    assert "`write_file`" in final.text
    assert [i.text for i in items if isinstance(i, TextDelta)] == [final.text]


async def test_anthropic_completion_cut_by_max_tokens_drops_the_last_tool_use(
    server: FakeLLMServer,
) -> None:
    reply = anthropic_text(
        "Two steps.",
        tool_uses=[
            ("toolu_1", "search", {"q": "x"}),
            ("toolu_2", "write_file", {"path": "a.py"}),  # what was parsed of it
        ],
    )
    reply.json["stop_reason"] = "max_tokens"
    server.push(reply)
    p = await _anthropic(server)
    try:
        out = await p.complete(
            CompletionRequest((ChatMessage("user", "go"),), tools=(SEARCH, WRITE))
        )
    finally:
        await p.shutdown()
    assert out.tool_calls == (ToolCall("toolu_1", "search", {"q": "x"}),)
    assert out.text.startswith("Two steps.\n\n(My answer was cut off")


async def test_calls_are_kept_when_the_answer_was_not_cut(server: FakeLLMServer) -> None:
    server.push(anthropic_text("", tool_uses=[("toolu_1", "search", {"q": "x"})]))
    p = await _anthropic(server)
    try:
        out = await p.complete(CompletionRequest((ChatMessage("user", "go"),), tools=(SEARCH,)))
    finally:
        await p.shutdown()
    assert out.tool_calls == (ToolCall("toolu_1", "search", {"q": "x"}),) and out.text == ""


# --- 6. reasoning models reject temperature and stop ---------------------------------
@pytest.mark.parametrize("model", ["gpt-5", "gpt-5-mini", "o3", "o4-mini", "o1"])
async def test_openai_reasoning_models_get_no_temperature(
    server: FakeLLMServer, model: str
) -> None:
    """o1/o3/o4-mini/gpt-5 answer 400 "Unsupported value: 'temperature'..." to any
    temperature but the default (and reject stop).  Parley sends 0.3 for compaction
    summaries and 0.2 for heartbeat/proactive runs, so neither is sent to them."""
    server.push(openai_text("ok"))
    p = OpenAIProvider(config_for(server, "openai", openai_model=model), PriceTable())
    await p.initialize()
    try:
        await p.complete(
            CompletionRequest(
                (ChatMessage("user", "summarise"),),
                max_tokens=1024,
                temperature=0.3,
                stop=("END",),
            )
        )
    finally:
        await p.shutdown()
    body = server.requests[0].body
    assert "temperature" not in body and "stop" not in body
    assert body["max_completion_tokens"] == 1024


async def test_other_models_and_compatible_servers_keep_temperature(
    server: FakeLLMServer,
) -> None:
    req = CompletionRequest((ChatMessage("user", "hi"),), temperature=0.3, stop=("END",))
    for p in (
        OpenAIProvider(config_for(server, "openai", openai_model="gpt-4o"), PriceTable()),
        OpenAIProvider(config_for(server, "compatible", llm_model="o3"), PriceTable()),
    ):
        await p.initialize()
        try:
            await p.complete(req)
        finally:
            await p.shutdown()
    for r in server.requests:
        assert r.body["temperature"] == 0.3 and r.body["stop"] == ["END"]


# --- 7. Ollama's context window -------------------------------------------------------
def test_ollama_default_model_window_is_not_overstated(server: FakeLLMServer) -> None:
    """Ollama runs a model with a 4k context by default (OLLAMA_CONTEXT_LENGTH on the
    server or a Modelfile num_ctx changes it) and silently cuts longer prompts from
    the front (system prompt and tools first); /v1 cannot set num_ctx.  The window
    assumed is Ollama's, not the model's trained maximum, so compaction comes first."""
    p = OllamaProvider(config_for(server, "ollama"), PriceTable())
    assert p.model_info().context_window == 4096
    assert p.model_info("qwen2.5:14b").context_window == 4096


def test_ollama_context_window_setting(server: FakeLLMServer) -> None:
    p = OllamaProvider(config_for(server, "ollama", ollama_context_window=32768), PriceTable())
    assert p.model_info().context_window == 32768
    other = OpenAIProvider(config_for(server, "compatible", llm_model="llama3.2"), PriceTable())
    assert other.model_info().context_window == 131_072  # not an Ollama server


def test_ollama_context_length_of_the_server_is_read_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OLLAMA_CONTEXT_LENGTH", "16384")
    assert LLMSettings(_env_file=None).ollama_context_window == 16384
    monkeypatch.setenv("OLLAMA_CONTEXT_WINDOW", "65536")  # Parley's own setting wins
    assert LLMSettings(_env_file=None).ollama_context_window == 65536


# --- 8. smart routing counts the cheap call of an escalated answer -------------------
def _escalating() -> tuple[SmartRouting, ScriptedProvider]:
    cheap_answer = Completion(
        "I'm not sure about that.", usage=TokenUsage(input=500, output=20, total=520)
    )
    primary_answer = Completion(
        "Here is the history...", usage=TokenUsage(input=500, output=300, total=800)
    )
    inner = ScriptedProvider("openai:gpt-4o", cheap_answer, primary_answer)
    return SmartRouting(inner, cheap_model="gpt-4o-mini", cascade=True), inner


async def test_escalation_keeps_the_cheap_calls_usage() -> None:
    """A Moderate question goes to the cheap model; an unsure answer is escalated.
    The Completion returned carries both calls' usage: the cheap call was paid for
    and reaches the budget and session.usage."""
    r, _ = _escalating()
    out = await r.complete(CompletionRequest((ChatMessage("user", MODERATE),)))
    assert r.escalations == 1
    assert out.text == "Here is the history..."
    assert out.usage == TokenUsage(input=1000, output=320, total=1320)


async def test_stream_escalation_keeps_the_cheap_calls_usage() -> None:
    r, _ = _escalating()
    items = [i async for i in r.stream(CompletionRequest((ChatMessage("user", MODERATE),)))]
    final = items[-1]
    assert isinstance(final, Completion) and r.escalations == 1
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["Here is the history..."]
    assert final.usage == TokenUsage(input=1000, output=320, total=1320)


async def test_stream_escalated_before_the_cheap_usage_arrived_counts_an_estimate() -> None:
    unsure = "I'm not sure. " + "x" * HOLD_CHARS
    cheap = [TextDelta(unsure), Completion(unsure, usage=TokenUsage(input=9, output=9))]
    primary = Completion("Here.", usage=TokenUsage(input=500, output=300, total=800))
    r = SmartRouting(ScriptedProvider("openai:gpt-4o", cheap, primary), "gpt-4o-mini")
    items = [i async for i in r.stream(CompletionRequest((ChatMessage("user", MODERATE),)))]
    final = items[-1]
    assert isinstance(final, Completion) and r.escalations == 1
    assert final.usage.input > 500 + len(MODERATE) // 5
    assert final.usage.output > 300 + len(unsure) // 5


# --- the fake server refuses what the real Messages API refuses ----------------------
_USE = {"type": "tool_use", "id": "toolu_1", "name": "s", "input": {}}
_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([{"role": "user", "content": [{"type": "text", "text": " \n"}]}], "non-whitespace"),
        ([{"role": "user", "content": ""}], "non-whitespace"),
        ([{"role": "user", "content": []}], "non-empty content"),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "a.b:0", "name": "s", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "a.b:0", "content": "r"}],
                },
            ],
            "should match pattern",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}],
                }
            ],
            "unexpected `tool_use_id`",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "s", "input": {}}],
                },
                {"role": "user", "content": "and?"},
            ],
            "without `tool_result`",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [_USE]},
                {"role": "user", "content": [_RESULT]},
                {"role": "assistant", "content": [_USE]},
                {"role": "user", "content": [_RESULT]},
            ],
            "messages.3.content.0: `tool_use` ids must be unique",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [_USE]},
                {
                    "role": "user",
                    "content": [_RESULT, dict(_RESULT), {"type": "text", "text": "b"}],
                },
            ],
            "each tool_use must have a single result. Found multiple `tool_result` blocks "
            "with id: toolu_1",
        ),
    ],
)
async def test_fake_server_rejects_what_the_messages_api_rejects(
    server: FakeLLMServer, messages: list[dict[str, Any]], problem: str
) -> None:
    assert problem in anthropic_request_problem({"messages": messages})
    p = await _anthropic(server)
    try:
        response = await p.client.post(
            "messages", json={"model": "m", "max_tokens": 10, "messages": messages}
        )
    finally:
        await p.shutdown()
    assert response.status_code == 400 and problem in response.text


async def test_fake_server_accepts_a_valid_tool_round(server: FakeLLMServer) -> None:
    good = {
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "looking"},
                    {"type": "tool_use", "id": "toolu_1", "name": "s", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}],
            },
            {"role": "assistant", "content": []},
        ]
    }
    assert anthropic_request_problem(good) == ""


async def test_a_request_the_fake_refuses_surfaces_as_bad_request(
    server: FakeLLMServer,
) -> None:
    server.validate = True
    p = await _anthropic(server)
    try:
        with pytest.raises(BadRequest, match="non-whitespace"):
            await p.post_json(
                "messages",
                {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": " "}]},
            )
    finally:
        await p.shutdown()


# --- ... and what the real chat completions API refuses ------------------------------
def _calls(*ids: str, name: str = "s") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for i in ids
        ],
    }


def _tool(cid: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": "r"}


_HI = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([_HI, _tool("call_x")], "must be a response to a preceeding message with 'tool_calls'"),
        (
            [_HI, _calls("c1"), _tool("c1"), _tool("c1")],
            "must be a response to a preceeding message with 'tool_calls'",
        ),
        (
            [_HI, _calls("c1", "c2"), _tool("c1"), {"role": "user", "content": "and?"}],
            "The following tool_call_ids did not have response messages: c2",
        ),
        (
            [_HI, _calls("c1", name="multi_tool_use.parallel"), _tool("c1")],
            "Invalid 'messages[1].tool_calls[0].function.name': string does not match pattern",
        ),
        ([_HI, _calls("c1", name=""), _tool("c1")], "does not match pattern"),
        (
            [_HI, _calls("c" * 41), _tool("c" * 41)],
            "Invalid 'messages[1].tool_calls[0].id': string too long. Expected a string with "
            "maximum length 40, but got a string with length 41 instead.",
        ),
    ],
)
async def test_fake_server_rejects_what_chat_completions_rejects(
    server: FakeLLMServer, messages: list[dict[str, Any]], problem: str
) -> None:
    assert problem in openai_request_problem({"messages": messages})
    p = OpenAIProvider(config_for(server, "openai", llm_max_retries=0), PriceTable())
    await p.initialize()
    try:
        with pytest.raises(BadRequest) as err:
            await p.post_json("chat/completions", {"model": "gpt-4o", "messages": messages})
    finally:
        await p.shutdown()
    assert problem in str(err.value)


def test_fake_server_accepts_a_valid_openai_tool_round() -> None:
    good = [_HI, _calls("c1", "c2"), _tool("c2"), _tool("c1"), {"role": "user", "content": "x"}]
    assert openai_request_problem({"messages": good}) == ""
    # the same id in two rounds is accepted (results pair with the message before)
    twice = [_HI, _calls("c1"), _tool("c1"), _calls("c1"), _tool("c1")]
    assert openai_request_problem({"messages": twice}) == ""


def _broken_history() -> tuple[ChatMessage, ...]:
    """A stored history of every kind Parley repairs before sending."""
    long_id = "fc_" + "ab" * 25
    out: list[ChatMessage] = [ChatMessage("system", "be brief")]
    for n, (cid, name) in enumerate(
        [("call_same", "t"), ("call_same", "multi_tool_use.parallel"), (long_id, "")]
    ):
        out += [
            ChatMessage("user", f"q{n}"),
            ChatMessage("assistant", "", (ToolCall(cid, name, {}),)),
            ChatMessage("tool", f"r{n}", tool_call_id=cid, name=name),
        ]
    out.append(ChatMessage("tool", "again", tool_call_id=long_id, name=""))  # a 2nd result
    # two calls of one answer with one id, each with its result
    twins = (ToolCall("call_0", "t", {"n": 1}), ToolCall("call_0", "t", {"n": 2}))
    out += [
        ChatMessage("user", "q3"),
        ChatMessage("assistant", "", twins),
        ChatMessage("tool", "r3a", tool_call_id="call_0", name="t"),
        ChatMessage("tool", "r3b", tool_call_id="call_0", name="t"),
    ]
    out += [ChatMessage("user", "unanswered"), ChatMessage("user", "next")]
    return tuple(out)


@pytest.mark.parametrize("backend", ["openai", "compat", "anthropic"])
async def test_a_broken_stored_history_is_sent_as_the_api_accepts_it(backend: str) -> None:
    async with FakeLLMServer() as server:
        cls = AnthropicProvider if backend == "anthropic" else OpenAIProvider
        p = cls(config_for(server, backend, llm_max_retries=0), PriceTable())
        tools = (ToolSpec("t", "a tool", {"type": "object", "properties": {}}),)
        request = CompletionRequest(_broken_history(), tools=tools)
        body = p.build_body(request, stream=False)
        if backend == "anthropic":
            assert anthropic_request_problem(body) == ""
        else:
            assert openai_request_problem(body) == ""
            roles = [m["role"] for m in body["messages"]]
            assert roles[-1] == "user" and roles[-2] != "user"
            assert body["messages"][-1]["content"] == "unanswered\n\nnext"
        assert p.build_body(request, stream=False) == body  # the same every time
