"""ANTHROPIC_PROMPT_CACHE_TTL=1h: the 1-hour cache, for conversations that pause.

A chat often goes quiet for more than five minutes between messages; with the
default cache every such turn writes the history again (1.25x the input price).
The 1-hour cache costs 2x to write and is read at 0.1x for up to an hour.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core.errors import ConfigError
from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.base import ChatMessage, CompletionRequest, TokenUsage
from agent_core.llm.prices import PriceTable
from agent_core.llm.settings import LLMSettings
from agent_core.settings import load
from tests.fakes.llm_servers import FakeClock, FakeLLMServer, anthropic_request_problem
from tests.unit.llm.conftest import config_for
from tests.unit.llm.test_llm_prompt_cache import MIN, SYSTEM, body_for, marked, tool_round


async def provider(server: FakeLLMServer, **kw: Any) -> AnthropicProvider:
    p = AnthropicProvider(config_for(server, "anthropic", **kw), PriceTable())
    await p.initialize()
    return p


def test_every_breakpoint_asks_for_one_hour_and_the_api_accepts_it() -> None:
    history = (
        ChatMessage("system", SYSTEM),
        ChatMessage("user", "look it up"),
        *tool_round(2, "a"),
    )
    body = body_for(history, anthropic_prompt_cache_ttl="1h")
    assert len(marked(body)) == 3
    assert json.dumps(body).count('"ttl": "1h"') == 3
    assert anthropic_request_problem(body) == ""
    default = body_for(history)
    assert '"ttl"' not in json.dumps(default) and len(marked(default)) == 3


@pytest.mark.parametrize(("ttl", "read_after_30_min"), [("5m", False), ("1h", True)])
async def test_a_pause_of_half_an_hour_reads_the_cache_only_with_one_hour(
    ttl: str, read_after_30_min: bool
) -> None:
    clock = FakeClock()
    async with FakeLLMServer(cache_min_tokens=MIN) as server:
        server.prompt_cache.clock = clock
        p = await provider(server, anthropic_prompt_cache_ttl=ttl)
        first = (ChatMessage("system", SYSTEM), ChatMessage("user", "hi"))
        try:
            a = await p.complete(CompletionRequest(first))
            clock.advance(30 * 60)  # the person comes back half an hour later
            second = (*first, ChatMessage("assistant", "hello"), ChatMessage("user", "again"))
            b = await p.complete(CompletionRequest(second))
            clock.advance(61 * 60)  # and then after more than an hour
            c = await p.complete(CompletionRequest((*second, ChatMessage("user", "and?"))))
        finally:
            await p.shutdown()
    assert a.usage.cache_write > 0
    assert (b.usage.cache_read == a.usage.cache_write) is read_after_30_min
    assert c.usage.cache_read == 0  # gone after an hour either way


async def test_one_hour_writes_are_priced_at_twice_the_input() -> None:
    async with FakeLLMServer(cache_min_tokens=MIN) as server:
        five = await provider(server, anthropic_model="claude-sonnet-4-5")
        hour = await provider(
            server, anthropic_model="claude-sonnet-4-5", anthropic_prompt_cache_ttl="1h"
        )
        try:
            five_info, hour_info = five.model_info(), hour.model_info()
        finally:
            await five.shutdown()
            await hour.shutdown()
    inp = five_info.input_cost_per_token
    assert inp > 0
    assert five_info.cache_write_cost_per_token == pytest.approx(1.25 * inp)
    assert hour_info.cache_write_cost_per_token == pytest.approx(2 * inp)
    written = TokenUsage(cache_write=10_000)
    assert hour_info.cost(written) == pytest.approx(2 * 10_000 * inp)


def test_the_setting_reads_5m_1h_and_a_bad_value_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_PROMPT_CACHE_TTL", raising=False)
    assert load(LLMSettings).anthropic_prompt_cache_ttl == "5m"
    monkeypatch.setenv("ANTHROPIC_PROMPT_CACHE_TTL", "1H")
    assert load(LLMSettings).anthropic_prompt_cache_ttl == "1h"
    monkeypatch.setenv("ANTHROPIC_PROMPT_CACHE_TTL", "24h")
    with pytest.raises(ConfigError) as info:
        load(LLMSettings)
    (line,) = info.value.problems
    assert line.startswith("ANTHROPIC_PROMPT_CACHE_TTL:") and "5m or 1h" in line
