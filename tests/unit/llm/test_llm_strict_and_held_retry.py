"""OpenAI strict tool schemas that the tools can live with (a null for an optional
argument means "not given"; a free-form map is sent without strict), and a
cheap-routed answer cut while its text was held back is asked again."""

from __future__ import annotations

from agent_core.llm.base import ChatMessage, Completion, CompletionRequest
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from agent_core.tools.current_time import CurrentTime
from agent_core.tools.http_request import HttpRequest
from agent_core.tools.registry import ToolRegistry
from tests.fakes.llm_servers import FakeLLMServer, openai_stream
from tests.unit.llm.conftest import config_for


async def _openai(server: FakeLLMServer) -> OpenAIProvider:
    p = OpenAIProvider(config_for(server, "openai"), PriceTable())
    await p.initialize()
    return p


# --- strict mode: optional arguments become required and nullable ----------------------
async def test_a_null_for_an_optional_argument_means_its_default() -> None:
    registry = ToolRegistry([CurrentTime()])
    request = CompletionRequest((ChatMessage("user", "what time is it?"),), tools=registry.specs())
    async with FakeLLMServer() as server:
        p = await _openai(server)
        try:
            sent = p.build_body(request, stream=True)["tools"][0]["function"]["parameters"]
            # what OpenAI is told: timezone is required and may be null
            assert sent["required"] == ["timezone"]
            assert sent["properties"]["timezone"]["type"] == ["string", "null"]
            # so the model answers with null (OpenAI's documented way to omit it)
            server.push(
                openai_stream([], tool_calls=[("call_1", "current_time", '{"timezone": null}')])
            )
            items = [i async for i in p.stream(request)]
        finally:
            await p.shutdown()
    final = items[-1]
    assert isinstance(final, Completion)
    call = final.tool_calls[0]
    # the tool runs with its default (UTC)
    args = registry.parse_args(call.name, call.arguments)
    assert args.model_dump() == {"timezone": "UTC"}


async def test_a_tool_with_free_form_keys_is_sent_without_strict() -> None:
    """http_request's headers are a dict[str, str]: strict mode would close that
    object and the model could send no header at all, so the tool goes non-strict
    (its own schema), while the other tools stay strict."""
    registry = ToolRegistry([HttpRequest(), CurrentTime()])
    request = CompletionRequest((ChatMessage("user", "fetch it"),), tools=registry.specs())
    async with FakeLLMServer() as server:
        p = await _openai(server)
        try:
            tools = {
                t["function"]["name"]: t["function"]
                for t in p.build_body(request, stream=True)["tools"]
            }
        finally:
            await p.shutdown()
    http = tools["http_request"]
    assert "strict" not in http
    assert http["parameters"] == registry.specs()[0].parameters
    assert http["parameters"]["properties"]["headers"]["additionalProperties"] == {"type": "string"}
    assert tools["current_time"]["strict"] is True


# --- smart routing holds a Moderate answer back; the retry layer below saw text -------
async def test_cut_cheap_stream_that_nobody_saw_is_retried() -> None:
    from agent_core.llm.factory import build_provider
    from tests.fakes.llm_servers import FakeClock
    from tests.unit.llm.conftest import make_settings

    question = (
        "Could you tell me a little about the history of the city of Paris, where it got "
        "its name from, and which rivers run through it and the land around it, briefly "
        "please, in a few short and simple sentences at most, thank you?"
    )
    from agent_core.llm.routing import Complexity, classify

    assert classify(question) is Complexity.MODERATE  # the first 200 characters are held back
    clock = FakeClock()
    async with FakeLLMServer() as server:
        settings = make_settings(
            llm_backend="openai_compatible",
            llm_base_url=server.openai_url,
            llm_model="big-model",
            llm_cheap_model="cheap-model",
        )
        llm = build_provider(settings, sleep=clock.sleep, clock=clock)
        await llm.initialize()
        # the connection drops after a few words (retryable), then the retry succeeds
        server.push(openai_stream(["Paris ", "was "], cut=True))
        server.push(openai_stream(["Paris was founded by the Parisii."]))
        try:
            items = [
                i async for i in llm.stream(CompletionRequest((ChatMessage("user", question),)))
            ]
        finally:
            await llm.shutdown()
    shown = "".join(i.text for i in items if not isinstance(i, Completion))
    # the user saw nothing of the cut attempt (held back), so it must be retried
    assert shown == "Paris was founded by the Parisii."
    assert len(server.requests) == 2
