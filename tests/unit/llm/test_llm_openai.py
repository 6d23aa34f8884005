"""The OpenAI chat-completions backend against a fake server speaking its wire format."""

from __future__ import annotations

import pytest

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
    BadRequest,
    ContextLengthExceeded,
    InvalidResponse,
    ModelNotAvailable,
    RateLimited,
    RequestFailed,
    Timeout,
)
from agent_core.llm.openai import NO_VISION_NOTE, OpenAIProvider
from agent_core.llm.prices import PriceTable
from tests.fakes.llm_servers import (
    FakeLLMServer,
    Reply,
    openai_error,
    openai_stream,
    openai_text,
    openai_tool_calls,
)
from tests.unit.llm.conftest import KEY, config_for

HELLO = CompletionRequest((ChatMessage("system", "be brief"), ChatMessage("user", "hello")))
SEARCH = ToolSpec(
    "search",
    "search the web",
    {
        "type": "object",
        "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["q"],
    },
)


async def provider(server: FakeLLMServer, backend: str = "openai", **kw: object) -> OpenAIProvider:
    p = OpenAIProvider(config_for(server, backend, **kw), PriceTable())
    await p.initialize()
    return p


async def collect(p: OpenAIProvider, req: CompletionRequest) -> list[TextDelta | Completion]:
    return [item async for item in p.stream(req)]


async def test_complete_sends_chat_completions_and_reads_answer(server: FakeLLMServer) -> None:
    server.push(openai_text("Hi there", usage={"prompt_tokens": 12, "completion_tokens": 3}))
    p = await provider(server)
    out = await p.complete(HELLO)
    await p.shutdown()
    assert out.text == "Hi there"
    assert out.usage.input == 12 and out.usage.output == 3
    assert out.finish_reason == "stop"
    req = server.requests[0]
    assert req.path == "/v1/chat/completions"
    assert req.headers["Authorization"] == f"Bearer {KEY}"
    assert req.body["model"] == "gpt-4o"
    assert req.body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]


async def test_tools_are_strict_on_openai_and_calls_parsed(server: FakeLLMServer) -> None:
    server.push(
        openai_tool_calls([("call_1", "search", {"q": "parley"}), ("", "proxy_search", {"q": "x"})])
    )
    p = await provider(server)
    out = await p.complete(CompletionRequest((ChatMessage("user", "find"),), tools=(SEARCH,)))
    await p.shutdown()
    fn = server.requests[0].body["tools"][0]["function"]
    assert fn["strict"] is True
    assert fn["parameters"]["additionalProperties"] is False
    assert fn["parameters"]["required"] == ["q", "limit"]
    assert fn["parameters"]["properties"]["limit"]["type"] == ["integer", "null"]
    assert out.tool_calls[0] == ToolCall("call_1", "search", {"q": "parley"})
    # a proxy_ prefix is dropped and a missing id gets a stable generated one
    assert out.tool_calls[1].name == "search"
    assert out.tool_calls[1].id.startswith("call_")
    assert out.finish_reason == "tool_calls"


async def test_compatible_backend_is_not_strict_and_sends_extra_headers(
    server: FakeLLMServer,
) -> None:
    server.push(openai_text("ok"))
    p = await provider(
        server, "compatible", llm_extra_headers="HTTP-Referer:https://me,X-Title:Parley"
    )
    await p.complete(CompletionRequest((ChatMessage("user", "q"),), tools=(SEARCH,), max_tokens=50))
    await p.shutdown()
    req = server.requests[0]
    assert "strict" not in req.body["tools"][0]["function"]
    assert req.body["max_tokens"] == 50
    # Header names are case-insensitive; the aiohttp transport sends custom ones lower-cased.
    headers = {k.lower(): v for k, v in req.headers.items()}
    assert headers["http-referer"] == "https://me"
    assert headers["x-title"] == "Parley"
    assert "authorization" not in headers  # LLM_API_KEY is optional


async def test_history_with_tool_calls_and_results_is_sent_in_wire_form(
    server: FakeLLMServer,
) -> None:
    server.push(openai_text("done"))
    p = await provider(server)
    history = (
        ChatMessage("user", "find"),
        ChatMessage("assistant", "", (ToolCall("call_9", "search", {"q": "a"}),)),
        ChatMessage("tool", "result text", tool_call_id="call_9", name="search"),
    )
    await p.complete(CompletionRequest(history, tools=(SEARCH,)))
    await p.shutdown()
    msgs = server.requests[0].body["messages"]
    assert msgs[1]["tool_calls"][0]["function"] == {"name": "search", "arguments": '{"q":"a"}'}
    assert msgs[2] == {"role": "tool", "tool_call_id": "call_9", "content": "result text"}


async def test_images_become_data_urls_for_vision_models(server: FakeLLMServer) -> None:
    server.push(openai_text("a cat"))
    p = await provider(server)
    img = ImagePart("image/png", "aGVsbG8=")
    await p.complete(CompletionRequest((ChatMessage("user", "what is this", images=(img,)),)))
    await p.shutdown()
    content = server.requests[0].body["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "what is this"}
    assert content[1]["image_url"]["url"] == "data:image/png;base64,aGVsbG8="


async def test_images_become_a_note_for_models_without_vision(server: FakeLLMServer) -> None:
    server.push(openai_text("?"))
    p = await provider(server, openai_model="gpt-3.5-turbo")
    img = ImagePart("image/png", "aGVsbG8=")
    await p.complete(CompletionRequest((ChatMessage("user", "what is this", images=(img,)),)))
    await p.shutdown()
    content = server.requests[0].body["messages"][0]["content"]
    assert content == f"what is this\n{NO_VISION_NOTE}"


async def test_stream_yields_deltas_then_one_completion_with_assembled_calls(
    server: FakeLLMServer,
) -> None:
    server.push(
        openai_stream(
            ["Let me ", "look."],
            tool_calls=[("call_a", "search", '{"q": "weather in Paris"}')],
            usage={
                "prompt_tokens": 30,
                "completion_tokens": 9,
                "prompt_tokens_details": {"cached_tokens": 10},
            },
        )
    )
    p = await provider(server)
    items = await collect(p, CompletionRequest((ChatMessage("user", "weather"),), tools=(SEARCH,)))
    await p.shutdown()
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["Let me ", "look."]
    final = items[-1]
    assert isinstance(final, Completion) and sum(isinstance(i, Completion) for i in items) == 1
    assert final.text == "Let me look."
    assert final.tool_calls == (ToolCall("call_a", "search", {"q": "weather in Paris"}),)
    assert final.usage.input == 20 and final.usage.cache_read == 10 and final.usage.output == 9
    assert server.requests[0].body["stream_options"] == {"include_usage": True}


async def test_list_models(server: FakeLLMServer) -> None:
    p = await provider(server)
    assert await p.list_models() == ["gpt-4o", "fake-model"]
    server.push(
        Reply(json={"models": [{"name": "a"}, {"model": "b"}, {"metadata": {"name": "c"}}]})
    )
    assert await p.list_models() == ["a", "b", "c"]
    server.push(Reply(json=["x", {"model_id": "y"}, {"model_name": "z"}]))
    assert await p.list_models() == ["x", "y", "z"]
    await p.shutdown()


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (
            openai_error(
                400,
                "context_length_exceeded",
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
            ),
            ContextLengthExceeded,
        ),
        (openai_error(401, "invalid_api_key", f"Incorrect API key provided: {KEY}."), AuthFailed),
        (
            openai_error(404, "model_not_found", "The model `gpt-9` does not exist"),
            ModelNotAvailable,
        ),
        (openai_error(429, "rate_limit_exceeded", "Rate limit reached"), RateLimited),
        (openai_error(500, "server_error", "The server had an error"), RequestFailed),
        (openai_error(503, "", "overloaded"), RequestFailed),
        (openai_error(400, "invalid_value", "temperature must be <= 2"), BadRequest),
        (Reply(body=b'{"choices": [ {"message": '), InvalidResponse),
        (Reply(json={"object": "chat.completion"}), InvalidResponse),
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
    assert KEY[:12] not in str(info.value)


async def test_rate_limit_carries_retry_after(server: FakeLLMServer) -> None:
    server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=7))
    server.push(openai_error(429, "rate_limit_exceeded", "slow down"))
    server.push(
        Reply(status=429, json={"error": {"message": "x"}}, headers={"retry-after-ms": "1500"})
    )
    caught = []
    for _ in range(3):  # a provider each: a 429's wait holds its provider's model back
        p = await provider(server)
        with pytest.raises(RateLimited) as info:
            await p.complete(HELLO)
        await p.shutdown()
        caught.append(info)
    first, second, third = caught
    assert len(server.requests) == 3
    assert first.value.retry_after == 7.0
    assert second.value.retry_after is None
    assert third.value.retry_after == 1.5


async def test_out_of_credit_is_not_a_rate_limit(server: FakeLLMServer) -> None:
    server.push(openai_error(429, "insufficient_quota", "You exceeded your current quota"))
    p = await provider(server)
    with pytest.raises(AuthFailed, match="out of credit"):
        await p.complete(HELLO)
    await p.shutdown()


async def test_openrouter_402_insufficient_credits_is_out_of_credit(server: FakeLLMServer) -> None:
    body = {"error": {"code": 402, "message": "Insufficient credits. Add more using the site"}}
    server.push(Reply(status=402, json=body))
    p = await provider(server)
    with pytest.raises(AuthFailed, match="out of credit"):
        await p.complete(HELLO)
    await p.shutdown()


async def test_stream_cut_mid_way_is_invalid_response(server: FakeLLMServer) -> None:
    server.push(openai_stream(["partial ", "answer"], cut=True))
    p = await provider(server)
    seen: list[str] = []
    with pytest.raises(InvalidResponse):
        async for item in p.stream(HELLO):
            if isinstance(item, TextDelta):
                seen.append(item.text)
    await p.shutdown()
    assert seen == ["partial ", "answer"]


async def test_stream_ending_without_done_is_invalid_response(server: FakeLLMServer) -> None:
    server.push(openai_stream(["partial"], done=False))
    p = await provider(server)
    with pytest.raises(InvalidResponse, match="ended before"):
        await collect(p, HELLO)
    await p.shutdown()


async def test_stream_error_status_is_mapped_before_any_text(server: FakeLLMServer) -> None:
    server.push(openai_error(401, "invalid_api_key", "bad key"))
    p = await provider(server)
    with pytest.raises(AuthFailed):
        await collect(p, HELLO)
    await p.shutdown()


async def test_error_chunk_inside_stream(server: FakeLLMServer) -> None:
    server.push(Reply(events=[("", {"error": {"message": "upstream overloaded", "code": 502}})]))
    p = await provider(server, "compatible")
    with pytest.raises(RequestFailed, match="overloaded"):
        await collect(p, HELLO)
    await p.shutdown()


async def test_read_timeout(server: FakeLLMServer) -> None:
    server.push(Reply(json={}, delay=0.5))
    p = await provider(server, llm_timeout_secs=0.05)
    with pytest.raises(Timeout):
        await p.complete(HELLO)
    await p.shutdown()


async def test_connection_refused_is_request_failed() -> None:
    srv = FakeLLMServer()
    await srv.start()
    await srv.stop()  # the port is now closed
    p = await provider(srv)
    with pytest.raises(RequestFailed, match="cannot connect"):
        await p.complete(HELLO)
    await p.shutdown()


async def test_one_client_reused_across_calls(server: FakeLLMServer) -> None:
    p = await provider(server)
    client = p.client
    for _ in range(3):
        await p.complete(HELLO)
    assert p.client is client
    await p.shutdown()
    with pytest.raises(RuntimeError):
        _ = p.client
