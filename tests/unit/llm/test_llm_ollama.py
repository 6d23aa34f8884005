"""Ollama through its /v1 endpoint: local, free, clear when it is not running."""

from __future__ import annotations

import pytest

from agent_core.llm.base import ChatMessage, CompletionRequest, TokenUsage
from agent_core.llm.errors import ModelNotAvailable, RequestFailed
from agent_core.llm.ollama import OllamaProvider
from agent_core.llm.prices import PriceTable
from tests.fakes.llm_servers import FakeLLMServer, Reply
from tests.unit.llm.conftest import config_for

HELLO = CompletionRequest((ChatMessage("user", "hello"),))


async def test_talks_to_v1_and_costs_nothing(server: FakeLLMServer) -> None:
    p = OllamaProvider(config_for(server, "ollama"), PriceTable())
    await p.initialize()
    out = await p.complete(HELLO)
    streamed = [i async for i in p.stream(HELLO)]
    await p.shutdown()
    assert out.text == "echo: hello"
    assert streamed[-1].text == "echo: hello"  # type: ignore[union-attr]
    assert server.requests[0].path == "/v1/chat/completions"
    assert server.requests[0].body["model"] == "llama3.2"
    assert "authorization" not in {k.lower() for k in server.requests[0].headers}
    assert p.model_info().cost(TokenUsage(input=10**6, output=10**6)) == 0.0
    assert p.name == "ollama:llama3.2"


async def test_nothing_listening_says_how_to_start_ollama() -> None:
    srv = FakeLLMServer()
    await srv.start()
    await srv.stop()
    p = OllamaProvider(config_for(srv, "ollama"), PriceTable())
    await p.initialize()
    with pytest.raises(RequestFailed) as info:
        await p.complete(HELLO)
    with pytest.raises(RequestFailed):
        _ = [i async for i in p.stream(HELLO)]
    await p.shutdown()
    assert "nothing is listening" in str(info.value)
    assert "ollama serve" in str(info.value)


async def test_unknown_model_says_how_to_pull_it(server: FakeLLMServer) -> None:
    server.push(
        Reply(
            status=404,
            json={"error": {"message": 'model "llama3.2" not found, try pulling it first'}},
        )
    )
    p = OllamaProvider(config_for(server, "ollama"), PriceTable())
    await p.initialize()
    with pytest.raises(ModelNotAvailable, match=r"ollama pull llama3\.2"):
        await p.complete(HELLO)
    await p.shutdown()
