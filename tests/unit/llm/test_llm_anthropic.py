"""The Anthropic Messages backend against a fake server speaking its wire format."""

from __future__ import annotations

import pytest

from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    ImagePart,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from agent_core.llm.errors import (
    AuthFailed,
    ContextLengthExceeded,
    InvalidResponse,
    ModelNotAvailable,
    RateLimited,
    RequestFailed,
    Timeout,
)
from agent_core.llm.prices import PriceTable
from tests.fakes.llm_servers import (
    FakeLLMServer,
    Reply,
    anthropic_error,
    anthropic_stream,
    anthropic_text,
)
from tests.unit.llm.conftest import KEY, config_for

HELLO = CompletionRequest((ChatMessage("system", "be brief"), ChatMessage("user", "hello")))
EPHEMERAL = {"type": "ephemeral"}
NO_CREDIT = (
    "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
    "Billing to upgrade or purchase credits."
)
SEARCH = ToolSpec("search", "search", {"type": "object", "properties": {"q": {"type": "string"}}})


async def provider(server: FakeLLMServer, **kw: object) -> AnthropicProvider:
    p = AnthropicProvider(config_for(server, "anthropic", **kw), PriceTable())
    await p.initialize()
    return p


async def test_complete_separates_system_and_reads_usage(server: FakeLLMServer) -> None:
    server.push(
        anthropic_text(
            "Hi!",
            usage={
                "input_tokens": 20,
                "output_tokens": 4,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 50,
            },
        )
    )
    p = await provider(server)
    out = await p.complete(HELLO)
    await p.shutdown()
    assert out.text == "Hi!" and out.finish_reason == "end_turn"
    assert (out.usage.input, out.usage.output, out.usage.cache_read, out.usage.cache_write) == (
        20,
        4,
        100,
        50,
    )
    req = server.requests[0]
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == KEY
    assert req.headers["anthropic-version"] == "2023-06-01"
    # prompt caching (on by default): breakpoints after the system and the last message
    assert req.body["system"] == [{"type": "text", "text": "be brief", "cache_control": EPHEMERAL}]
    assert req.body["max_tokens"] == 4096
    assert req.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": EPHEMERAL}]}
    ]


async def test_tool_use_and_tool_result_blocks(server: FakeLLMServer) -> None:
    server.push(anthropic_text("Searching", tool_uses=[("toolu_1", "search", {"q": "x"})]))
    p = await provider(server)
    history = (
        ChatMessage("user", "find a and b"),
        ChatMessage(
            "assistant",
            "",
            (ToolCall("toolu_a", "search", {"q": "a"}), ToolCall("toolu_b", "search", {"q": "b"})),
        ),
        ChatMessage("tool", "A", tool_call_id="toolu_a", name="search"),
        ChatMessage("tool", "B", tool_call_id="toolu_b", name="search"),
        ChatMessage("user", "and now?"),
    )
    out = await p.complete(CompletionRequest(history, tools=(SEARCH,), stop=("END",)))
    await p.shutdown()
    assert out.tool_calls == (ToolCall("toolu_1", "search", {"q": "x"}),)
    assert out.text == "Searching" and out.finish_reason == "tool_use"
    body = server.requests[0].body
    assert body["tools"] == [  # no system: the tools end the cached prefix
        {
            "name": "search",
            "description": "search",
            "input_schema": SEARCH.parameters,
            "cache_control": EPHEMERAL,
        }
    ]
    assert body["stop_sequences"] == ["END"]
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]  # alternating
    assert msgs[1]["content"][0] == {
        "type": "tool_use",
        "id": "toolu_a",
        "name": "search",
        "input": {"q": "a"},
    }
    results = msgs[2]["content"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"}
    assert results[1]["tool_use_id"] == "toolu_b"
    assert results[2] == {"type": "text", "text": "and now?", "cache_control": EPHEMERAL}


async def test_images_are_base64_blocks(server: FakeLLMServer) -> None:
    server.push(anthropic_text("a cat"))
    p = await provider(server)
    img = ImagePart("image/jpeg", "/9j/AAAA")
    await p.complete(CompletionRequest((ChatMessage("user", "what?", images=(img,)),)))
    await p.shutdown()
    blocks = server.requests[0].body["messages"][0]["content"]
    assert blocks[0] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/AAAA"},
    }
    assert blocks[1] == {"type": "text", "text": "what?", "cache_control": EPHEMERAL}


async def test_stream_text_and_tool_use_deltas(server: FakeLLMServer) -> None:
    server.push(
        anthropic_stream(
            ["Let me ", "check."],
            tool_uses=[("toolu_9", "search", '{"q": "weather in Paris"}')],
            input_tokens=40,
            output_tokens=12,
            cache_read=8,
        )
    )
    p = await provider(server)
    items = [i async for i in p.stream(CompletionRequest(HELLO.messages, tools=(SEARCH,)))]
    await p.shutdown()
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["Let me ", "check."]
    final = items[-1]
    assert isinstance(final, Completion)
    assert sum(isinstance(i, Completion) for i in items) == 1
    assert final.text == "Let me check."
    assert final.tool_calls == (ToolCall("toolu_9", "search", {"q": "weather in Paris"}),)
    assert final.usage.input == 40 and final.usage.output == 12 and final.usage.cache_read == 8
    assert final.finish_reason == "tool_use"
    assert server.requests[0].body["stream"] is True


async def test_list_models(server: FakeLLMServer) -> None:
    server.push(Reply(json={"data": [{"id": "claude-sonnet-4-20250514", "type": "model"}]}))
    p = await provider(server)
    assert await p.list_models() == ["claude-sonnet-4-20250514"]
    await p.shutdown()
    assert server.requests[0].path == "/v1/models"


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (
            anthropic_error(
                400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
            ),
            ContextLengthExceeded,
        ),
        (anthropic_error(401, "authentication_error", "invalid x-api-key"), AuthFailed),
        (anthropic_error(403, "permission_error", "no access"), AuthFailed),
        # out of credit: a 400 invalid_request_error, or a 402 billing_error
        (anthropic_error(400, "invalid_request_error", NO_CREDIT), AuthFailed),
        (anthropic_error(402, "billing_error", "Payment required"), AuthFailed),
        (anthropic_error(404, "not_found_error", "model: claude-9"), ModelNotAvailable),
        (anthropic_error(429, "rate_limit_error", "Number of requests exceeded"), RateLimited),
        (anthropic_error(500, "api_error", "Internal server error"), RequestFailed),
        (anthropic_error(529, "overloaded_error", "Overloaded"), RequestFailed),
        (Reply(body=b"<html>Bad gateway"), InvalidResponse),
    ],
)
async def test_errors_map_to_the_tree(
    server: FakeLLMServer, reply: Reply, error: type[Exception]
) -> None:
    server.push(reply)
    p = await provider(server)
    with pytest.raises(error) as info:
        await p.complete(HELLO)
    await p.shutdown()
    assert KEY not in str(info.value)


async def test_rate_limit_retry_after(server: FakeLLMServer) -> None:
    server.push(anthropic_error(429, "rate_limit_error", "slow", retry_after=12))
    p = await provider(server)
    with pytest.raises(RateLimited) as info:
        await p.complete(HELLO)
    await p.shutdown()
    assert info.value.retry_after == 12.0


async def test_overloaded_error_event_mid_stream(server: FakeLLMServer) -> None:
    stream = anthropic_stream(["Hel"], stop=False)
    assert stream.events is not None
    stream.events.append(
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )
    server.push(stream)
    p = await provider(server)
    with pytest.raises(RequestFailed, match="Overloaded"):
        _ = [i async for i in p.stream(HELLO)]
    await p.shutdown()


async def test_billing_error_event_mid_stream_is_out_of_credit(server: FakeLLMServer) -> None:
    stream = anthropic_stream([], stop=False)
    assert stream.events is not None
    stream.events.append(
        ("error", {"type": "error", "error": {"type": "billing_error", "message": "No credit"}})
    )
    server.push(stream)
    p = await provider(server)
    with pytest.raises(AuthFailed, match="out of credit"):
        _ = [i async for i in p.stream(HELLO)]
    await p.shutdown()


async def test_stream_cut_mid_way(server: FakeLLMServer) -> None:
    server.push(anthropic_stream(["partial"], cut=True))
    p = await provider(server)
    with pytest.raises(InvalidResponse):
        _ = [i async for i in p.stream(HELLO)]
    await p.shutdown()


async def test_stream_without_message_stop(server: FakeLLMServer) -> None:
    server.push(anthropic_stream(["partial"], stop=False))
    p = await provider(server)
    with pytest.raises(InvalidResponse, match="ended before"):
        _ = [i async for i in p.stream(HELLO)]
    await p.shutdown()


async def test_read_timeout(server: FakeLLMServer) -> None:
    server.push(Reply(json={}, delay=0.5))
    p = await provider(server, llm_timeout_secs=0.05)
    with pytest.raises(Timeout):
        await p.complete(HELLO)
    await p.shutdown()
