"""A whole agent turn on the Anthropic backend against the fake Messages API, whose
prompt cache behaves like the real one: the tool round's second call reads the
prefix the first wrote, the turn costs less than without caching, and /cost and
/status say how much was read from the cache."""

from __future__ import annotations

import itertools
import json
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.prices import PriceTable
from tests.fakes.llm_servers import FakeLLMServer, Reply, anthropic_stream, anthropic_text
from tests.integration.agent.conftest import user_event
from tests.unit.llm.conftest import config_for

_ids = itertools.count(1)


def sleepy_then_answer(path: str, body: dict[str, Any]) -> Reply:
    """A tool call for a user's text, then an answer once the tool's result is in;
    the usage is left to the fake server (measured from the request and its cache)."""
    last = body["messages"][-1]["content"]
    if any(b.get("type") == "tool_result" for b in last):
        text = "the tool said " + str(last[-1]["content"])
        if body.get("stream"):
            return anthropic_stream([text], model=body["model"])
        return anthropic_text(text, model=body["model"])
    tid = f"toolu_{next(_ids)}"
    if body.get("stream"):
        return anthropic_stream(
            [], tool_uses=[(tid, "sleepy", json.dumps({"label": "zzz"}))], model=body["model"]
        )
    return anthropic_text("", tool_uses=[(tid, "sleepy", {"label": "zzz"})], model=body["model"])


async def _turn(world: Any, thread: ThreadKey, *, cache: bool) -> tuple[Any, list[str]]:
    async with FakeLLMServer(cache_min_tokens=200) as server:
        server.responder = sleepy_then_answer
        model = AnthropicProvider(
            config_for(server, "anthropic", anthropic_prompt_cache=cache), PriceTable()
        )
        await model.initialize()
        try:
            w = world(model)
            await w.start()
            for text in ("please use the tool", "/cost", "/status"):
                await w.send(user_event(thread, text))
                await w.settle(thread)
            session = await w.session(thread)
            texts = w.texts(thread)
            await w.stop()
        finally:
            await model.shutdown()
        calls = [r for r in server.requests if r.path == "/v1/messages"]
        assert len(calls) == 2  # the tool call, then the answer
        return session, texts


async def test_a_tool_round_reads_the_cache_and_the_turn_costs_less(world: Any) -> None:
    cached, cached_texts = await _turn(world, ThreadKey("web", "local", "cache-on"), cache=True)
    plain, plain_texts = await _turn(world, ThreadKey("web", "local", "cache-off"), cache=False)
    assert "the tool said zzz" in cached_texts[0] and "the tool said zzz" in plain_texts[0]
    # the second call read what the first wrote (system, tools, the user's message)
    assert cached.usage.cache_read > 0 and cached.usage.cache_write > 0
    assert plain.usage.cache_read == plain.usage.cache_write == 0
    assert cached.usage.prompt == plain.usage.prompt  # the same prompts, split otherwise
    assert 0 < cached.cost_usd < plain.cost_usd
    # /cost and /status tell the user
    cost, status = cached_texts[-2], cached_texts[-1]
    assert f"Prompt cache: {cached.usage.cache_read:,} of the {cached.usage.prompt:,}" in cost
    assert "**Prompt cache:**" in status and "% of prompt tokens read from it" in status
    assert "Prompt cache" not in plain_texts[-2] and "Prompt cache" not in plain_texts[-1]
