"""Anthropic prompt caching: where the breakpoints go, the setting, what the fake
server (playing the real cache) reports, and what it costs."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from agent_core.errors import ConfigError
from agent_core.llm.anthropic import AnthropicProvider, add_cache_breakpoints
from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    ImagePart,
    TokenUsage,
    ToolCall,
    ToolSpec,
)
from agent_core.llm.errors import RequestFailed
from agent_core.llm.failover import Failover
from agent_core.llm.prices import PriceTable
from agent_core.llm.settings import LLMSettings
from agent_core.settings import load
from tests.fakes.anthropic_cache import prompt_tokens
from tests.fakes.llm_servers import (
    FakeClock,
    FakeLLMServer,
    Reply,
    ScriptedProvider,
    anthropic_request_problem,
)
from tests.unit.llm.conftest import config_for

EPHEMERAL = {"type": "ephemeral"}
SEARCH = ToolSpec("search", "search", {"type": "object", "properties": {"q": {"type": "string"}}})
SYSTEM = "You are a careful assistant. " * 60  # ~1700 characters: above the test minimum
MIN = 200  # the fake's minimum cacheable prefix in these tests (tokens)


@pytest.fixture
async def server() -> Any:
    async with FakeLLMServer(cache_min_tokens=MIN) as srv:
        yield srv


async def provider(server: FakeLLMServer, **kw: Any) -> AnthropicProvider:
    p = AnthropicProvider(config_for(server, "anthropic", **kw), PriceTable())
    await p.initialize()
    return p


def marked(body: dict[str, Any]) -> list[str]:
    """Where the breakpoints of ``body`` are (tools.i / system.i / messages.i.content.j)."""
    out = [f"tools.{i}" for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        out += [f"system.{i}" for i, b in enumerate(system) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        out += [
            f"messages.{i}.content.{j}" for j, b in enumerate(m["content"]) if "cache_control" in b
        ]
    return out


def body_for(messages: tuple[ChatMessage, ...], **kw: Any) -> dict[str, Any]:
    p = AnthropicProvider(config_for(FakeLLMServer(), "anthropic", **kw), PriceTable())
    return p.build_body(CompletionRequest(messages, tools=(SEARCH,)), stream=False)


def tool_round(n: int, tag: str) -> tuple[ChatMessage, ...]:
    calls = tuple(ToolCall(f"toolu_{tag}{i}", "search", {"q": f"{tag}{i}"}) for i in range(n))
    results = tuple(
        ChatMessage("tool", f"result {tag}{i}", tool_call_id=c.id, name="search")
        for i, c in enumerate(calls)
    )
    return (ChatMessage("assistant", "", calls), *results)


# --- where the breakpoints go -------------------------------------------------------
def test_breakpoints_end_the_system_and_the_last_message() -> None:
    body = body_for(
        (
            ChatMessage("system", "be brief"),
            ChatMessage("user", "hi"),
            ChatMessage("assistant", "hello"),
            ChatMessage("user", "and now?"),
        )
    )
    # the system goes as a list of text blocks so it can carry the breakpoint
    assert body["system"] == [{"type": "text", "text": "be brief", "cache_control": EPHEMERAL}]
    assert "cache_control" not in body["tools"][0]  # the system breakpoint covers the tools
    # the last message (read by the next call) and where the previous call put its own
    assert marked(body) == ["system.0", "messages.0.content.0", "messages.2.content.0"]


def test_a_history_ending_with_tool_results_marks_the_last_result() -> None:
    body = body_for((ChatMessage("system", "s"), ChatMessage("user", "find"), *tool_round(3, "a")))
    last = body["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["tool_result"] * 3
    assert last[-1]["cache_control"] == EPHEMERAL
    assert marked(body) == ["system.0", "messages.0.content.0", "messages.2.content.2"]


def test_a_message_of_only_an_image_marks_the_image() -> None:
    img = ImagePart("image/png", "iVBORw0KGgo=")
    body = body_for((ChatMessage("system", "s"), ChatMessage("user", " ", images=(img,))))
    (block,) = body["messages"][-1]["content"]
    assert block["type"] == "image" and block["cache_control"] == EPHEMERAL


def test_without_a_system_the_last_tool_ends_the_prefix() -> None:
    body = body_for((ChatMessage("user", "hi"),))
    assert "system" not in body
    assert marked(body) == ["tools.0", "messages.0.content.0"]


def test_thinking_and_empty_text_blocks_never_carry_a_breakpoint() -> None:
    body: dict[str, Any] = {
        "system": [{"type": "text", "text": "s"}, {"type": "text", "text": ""}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "thinking", "thinking": "hmm", "signature": "x"},
                ],
            },
        ],
    }
    add_cache_breakpoints(body)
    assert "cache_control" in body["system"][0] and "cache_control" not in body["system"][1]
    assert "cache_control" in body["messages"][1]["content"][0]
    assert "cache_control" not in body["messages"][1]["content"][1]
    assert anthropic_request_problem(body) == ""


def test_never_more_than_four_breakpoints_whatever_the_history() -> None:
    rng = random.Random(7)
    img = ImagePart("image/png", "iVBORw0KGgo=")
    for n in range(300):
        history: list[ChatMessage] = []
        if rng.random() < 0.7:
            history.append(ChatMessage("system", rng.choice(["sys", " ", ""])))
        for k in range(rng.randint(1, 12)):
            kind = rng.random()
            if kind < 0.4:
                images = (img,) if rng.random() < 0.2 else ()
                history.append(ChatMessage("user", rng.choice(["q", " ", ""]), images=images))
            elif kind < 0.7:
                history.append(ChatMessage("assistant", rng.choice(["a", "\n\n", ""])))
            else:
                history.extend(tool_round(rng.randint(1, 30), f"r{n}x{k}"))
        body = body_for(tuple(history))
        assert 1 <= len(marked(body)) <= 4, (n, marked(body))
        assert anthropic_request_problem(body) == "", (n, anthropic_request_problem(body))


def test_the_setting_turns_it_off() -> None:
    body = body_for(
        (ChatMessage("system", "be brief"), ChatMessage("user", "hi")),
        anthropic_prompt_cache=False,
    )
    assert body["system"] == "be brief"
    assert "cache_control" not in json.dumps(body)


def test_the_setting_reads_on_off_and_a_bad_value_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_PROMPT_CACHE", raising=False)
    assert load(LLMSettings).anthropic_prompt_cache is True  # the default
    monkeypatch.setenv("ANTHROPIC_PROMPT_CACHE", "off")
    assert load(LLMSettings).anthropic_prompt_cache is False
    monkeypatch.setenv("ANTHROPIC_PROMPT_CACHE", "maybe")
    with pytest.raises(ConfigError) as info:
        load(LLMSettings)
    (line,) = info.value.problems
    assert line.startswith("ANTHROPIC_PROMPT_CACHE:") and "maybe" not in line


# --- the fake server refuses what the API refuses ------------------------------------
def _bad(body_messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": body_messages, **extra}


def _text(t: str, cc: Any = EPHEMERAL) -> dict[str, Any]:
    return {"type": "text", "text": t, "cache_control": cc}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            _bad(
                [{"role": "user", "content": [_text(str(i)) for i in range(4)]}],
                system=[_text("s")],
            ),
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        (
            _bad([{"role": "user", "content": [_text("q", {"type": "persistent"})]}]),
            "messages.0.content.0.cache_control.type: Input should be 'ephemeral'",
        ),
        (
            _bad([{"role": "user", "content": [_text("q", {"type": "ephemeral", "ttl": "2h"})]}]),
            "Input should be '5m' or '1h'",
        ),
        (
            _bad([{"role": "user", "content": [{"type": "text", "text": "q"}, _text("")]}]),
            "messages.0.content.1.text: cache_control cannot be set for empty text blocks",
        ),
        (
            _bad(
                [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "thinking",
                                "thinking": "t",
                                "signature": "s",
                                "cache_control": EPHEMERAL,
                            }
                        ],
                    },
                ]
            ),
            "Extra inputs are not permitted",
        ),
    ],
)
async def test_fake_server_refuses_bad_cache_control_like_the_api(
    server: FakeLLMServer, body: dict[str, Any], problem: str
) -> None:
    p = await provider(server)
    try:
        response = await p.client.post("messages", json=body)
    finally:
        await p.shutdown()
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert problem in error["error"]["message"]


# --- what the cache saves -------------------------------------------------------------
def _usage(u: TokenUsage) -> tuple[int, int, int]:
    return (u.input, u.cache_read, u.cache_write)


@pytest.mark.parametrize("stream", [False, True])
async def test_the_next_call_of_a_turn_reads_the_cache(server: FakeLLMServer, stream: bool) -> None:
    p = await provider(server)
    first_messages = (ChatMessage("system", SYSTEM), ChatMessage("user", "look it up"))
    second_messages = (*first_messages, *tool_round(2, "a"))

    async def call(messages: tuple[ChatMessage, ...]) -> Completion:
        request = CompletionRequest(messages, tools=(SEARCH,))
        if not stream:
            return await p.complete(request)
        items = [i async for i in p.stream(request)]
        assert isinstance(items[-1], Completion)
        return items[-1]

    try:
        first = await call(first_messages)
        second = await call(second_messages)
    finally:
        await p.shutdown()
    bodies = [r.body for r in server.requests]
    # the first call writes its whole prompt (all of it is before the last breakpoint)
    assert _usage(first.usage) == (0, 0, prompt_tokens(bodies[0]))
    # the second reads that and writes only the tool round
    total = prompt_tokens(bodies[1])
    assert second.usage.cache_read == first.usage.cache_write
    assert second.usage.cache_write == total - first.usage.cache_write > 0
    assert second.usage.input == 0 and second.usage.prompt == total
    # and costs less than it would without the cache
    info = p.model_info()
    assert info.cost(second.usage) < info.cost(TokenUsage(input=total, output=second.usage.output))


async def test_the_turn_costs_less_with_the_cache_than_without(server: FakeLLMServer) -> None:
    turn = [
        (ChatMessage("system", SYSTEM), ChatMessage("user", "look it up")),
    ]
    for k in range(3):  # three tool rounds, then the answer
        turn.append((*turn[-1], *tool_round(2, f"r{k}")))
    costs = {}
    for on in (True, False):
        server.prompt_cache.clear()
        p = await provider(server, anthropic_prompt_cache=on)
        try:
            usages = [(await p.complete(CompletionRequest(m, tools=(SEARCH,)))).usage for m in turn]
        finally:
            await p.shutdown()
        total = TokenUsage()
        for u in usages:
            total += u
        costs[on] = p.model_info().cost(total)
        if on:
            assert all(u.cache_read > 0 for u in usages[1:])
        else:
            assert total.cache_read == total.cache_write == 0
    assert costs[True] < 0.7 * costs[False], costs


async def test_a_tool_round_of_more_than_20_blocks_still_reads_the_history(
    server: FakeLLMServer,
) -> None:
    """The API looks for a cached prefix at most ~20 blocks before a breakpoint: a
    round of 12 parallel calls adds 24 blocks, so the breakpoint on where the
    previous call ended is what keeps the history read from the cache."""
    p = await provider(server)
    first = (
        ChatMessage("system", SYSTEM),
        ChatMessage("user", "look it up"),
        *tool_round(1, "a"),
    )
    second = (*first, *tool_round(12, "b"))
    try:
        a = await p.complete(CompletionRequest(first, tools=(SEARCH,)))
        b = await p.complete(CompletionRequest(second, tools=(SEARCH,)))
    finally:
        await p.shutdown()
    assert b.usage.cache_read == a.usage.prompt


async def test_below_the_minimum_nothing_is_cached_and_nothing_fails() -> None:
    async with FakeLLMServer() as srv:  # the real minimum: 1024 tokens for Sonnet 4
        p = await provider(srv)
        messages = (ChatMessage("system", "be brief"), ChatMessage("user", "hi"))
        try:
            for _ in range(2):
                out = await p.complete(CompletionRequest(messages))
                assert out.usage.cache_read == out.usage.cache_write == 0
                assert out.usage.input == prompt_tokens(srv.requests[-1].body)
        finally:
            await p.shutdown()


async def test_the_cache_expires_five_minutes_after_its_last_read(server: FakeLLMServer) -> None:
    clock = FakeClock()
    server.prompt_cache.clock = clock
    p = await provider(server)
    req = CompletionRequest((ChatMessage("system", SYSTEM), ChatMessage("user", "hi")))
    try:
        await p.complete(req)
        clock.advance(240)
        assert (await p.complete(req)).usage.cache_read > 0
        clock.advance(240)  # 8 minutes after the write, 4 after the read
        assert (await p.complete(req)).usage.cache_read > 0
        clock.advance(301)
        assert (await p.complete(req)).usage.cache_read == 0
    finally:
        await p.shutdown()


# --- streamed usage ------------------------------------------------------------------
def _stream(start: dict[str, Any], delta: dict[str, Any]) -> Reply:
    message = {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5"}
    return Reply(
        events=[
            ("message_start", {"type": "message_start", "message": {**message, "usage": start}}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "ok"},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta},
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


START = {
    "input_tokens": 12,
    "cache_read_input_tokens": 3000,
    "cache_creation_input_tokens": 200,
    "output_tokens": 1,
}


@pytest.mark.parametrize(
    "delta",
    [
        {"output_tokens": 80},  # 2023-06-01: the delta carries the output only
        {**START, "output_tokens": 80},  # newer: the input counts again, cumulative
        # a compatible server repeating them as 0 / null must not erase them
        {
            "input_tokens": 0,
            "cache_read_input_tokens": None,
            "cache_creation_input_tokens": 0,
            "output_tokens": 80,
        },
    ],
)
async def test_streamed_usage_combines_message_start_and_message_delta(
    server: FakeLLMServer, delta: dict[str, Any]
) -> None:
    server.push(_stream(START, delta))
    p = await provider(server)
    try:
        items = [i async for i in p.stream(CompletionRequest((ChatMessage("user", "hi"),)))]
    finally:
        await p.shutdown()
    final = items[-1]
    assert isinstance(final, Completion)
    u = final.usage
    assert (u.input, u.cache_read, u.cache_write, u.output) == (12, 3000, 200, 80)
    assert u.total == 12 + 3000 + 200 + 80


# --- failover to Anthropic ------------------------------------------------------------
async def test_failover_to_anthropic_maps_ids_and_caches(server: FakeLLMServer) -> None:
    """A conversation that started on an OpenAI-compatible server (Kimi ids such as
    ``functions.search:0``) fails over to Anthropic: the ids are mapped, the request
    is valid with its breakpoints, and the next call reads the cache."""
    primary = ScriptedProvider("groq:kimi", RequestFailed("502"), RequestFailed("502"))
    anthropic = await provider(server)
    failover = Failover([primary, anthropic], threshold=5)
    history = (
        ChatMessage("system", SYSTEM),
        ChatMessage("user", "search x"),
        ChatMessage("assistant", "", (ToolCall("functions.search:0", "search", {"q": "x"}),)),
        ChatMessage("tool", "found", tool_call_id="functions.search:0", name="search"),
    )
    try:
        first = await failover.complete(CompletionRequest(history, tools=(SEARCH,), session_id="s"))
        more = (*history, ChatMessage("assistant", "x is found"), ChatMessage("user", "and y?"))
        second = await failover.complete(CompletionRequest(more, tools=(SEARCH,), session_id="s"))
    finally:
        await anthropic.shutdown()
    assert first.provider == second.provider == anthropic.name
    for r in server.requests:
        assert anthropic_request_problem(r.body) == ""
        assert 2 <= len(marked(r.body)) <= 4
    ids = [
        b.get("id") or b.get("tool_use_id")
        for m in server.requests[0].body["messages"]
        for b in m["content"]
        if b["type"] in ("tool_use", "tool_result")
    ]
    assert len(set(ids)) == 1 and ":" not in ids[0]
    assert second.usage.cache_read == first.usage.prompt
