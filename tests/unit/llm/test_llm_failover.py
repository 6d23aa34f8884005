"""Failover: order, cooldown, never blocking, sticky turns, tool-message repair."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent_core.agent.agent import friendly_llm_error
from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.base import ChatMessage, Completion, CompletionRequest, TextDelta, ToolCall
from agent_core.llm.errors import (
    AuthFailed,
    ContextLengthExceeded,
    ModelNotAvailable,
    RequestFailed,
    Timeout,
)
from agent_core.llm.failover import Failover
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from tests.fakes.llm_servers import (
    FakeClock,
    FakeLLMServer,
    ScriptedProvider,
    anthropic_error,
    openai_error,
    openai_stream,
)
from tests.unit.llm.conftest import config_for

REQ = CompletionRequest((ChatMessage("user", "hi"),))


def three(
    clock: FakeClock,
) -> tuple[Failover, ScriptedProvider, ScriptedProvider, ScriptedProvider]:
    a, b, c = (ScriptedProvider(f"{n}:m", default=n) for n in "abc")
    return Failover([a, b, c], threshold=3, cooldown_secs=300, clock=clock), a, b, c


async def test_uses_the_first_healthy_provider_in_order(clock: FakeClock) -> None:
    f, a, b, _ = three(clock)
    assert (await f.complete(REQ)).text == "a"
    a.outcomes.append(RequestFailed("500"))
    assert (await f.complete(REQ)).text == "b"
    assert len(b.calls) == 1


async def test_cools_down_after_threshold_failures_then_comes_back(clock: FakeClock) -> None:
    f, a, _b, _ = three(clock)
    a.outcomes.extend([RequestFailed("500"), Timeout("t"), RequestFailed("500")])
    for _ in range(3):
        assert (await f.complete(REQ)).text == "b"
    assert f.cooling(0)
    calls = len(a.calls)
    assert (await f.complete(REQ)).text == "b"
    assert len(a.calls) == calls  # skipped while cooling
    clock.advance(301)
    assert (await f.complete(REQ)).text == "a"


async def test_all_cooling_uses_the_one_that_cooled_first(clock: FakeClock) -> None:
    f, _a, _b, _c = three(clock)
    f._failed(1, RequestFailed())  # b, c, a cool down in that order
    f._failed(1, RequestFailed())
    f._failed(1, RequestFailed())
    clock.advance(1)
    for _ in range(3):
        f._failed(2, RequestFailed())
    clock.advance(1)
    for _ in range(3):
        f._failed(0, RequestFailed())
    assert f.order() == [1]
    assert (await f.complete(REQ)).text == "b"


async def test_request_errors_are_not_failed_over(clock: FakeClock) -> None:
    f, a, b, _ = three(clock)
    a.outcomes.append(ContextLengthExceeded("too long"))
    with pytest.raises(ContextLengthExceeded):
        await f.complete(REQ)
    assert b.calls == []


async def test_provider_problems_move_on_without_cooling(clock: FakeClock) -> None:
    f, a, _b, _ = three(clock)
    a.outcomes.extend([AuthFailed("401")] * 5)
    for _ in range(5):
        assert (await f.complete(REQ)).text == "b"
    assert not f.cooling(0)


async def test_all_failing_raises_the_last_error(clock: FakeClock) -> None:
    f, a, b, c = three(clock)
    a.outcomes.append(RequestFailed("a down"))
    b.outcomes.append(RequestFailed("b down"))
    c.outcomes.append(Timeout("c slow"))
    with pytest.raises(Timeout, match="c slow"):
        await f.complete(REQ)


async def test_fallbacks_use_their_own_model(clock: FakeClock) -> None:
    f, a, b, _ = three(clock)
    a.outcomes.append(RequestFailed("500"))
    await f.complete(CompletionRequest(REQ.messages, model="cheap-model"))
    assert a.calls[0].model == "cheap-model"
    assert b.calls[0].model is None


async def test_a_turn_sticks_to_its_provider_the_next_turn_tries_the_primary(
    clock: FakeClock,
) -> None:
    """One 503 moves a turn's calls to the fallback (its tool loop stays there, for the
    fallback's prompt cache); the conversation's next turn is the primary's again, with
    the model chosen for it."""
    f, a, _b, _ = three(clock)
    a.outcomes.append(RequestFailed("503"))
    t1 = CompletionRequest(REQ.messages, model="chosen", session_id="s1", turn_id="t1")
    assert (await f.complete(t1)).text == "b"
    assert (await f.complete(t1)).text == "b"  # the same turn: stays on b
    assert len(a.calls) == 1
    t2 = replace(t1, turn_id="t2")
    assert (await f.complete(t2)).text == "a"
    assert a.calls[-1].model == "chosen"
    # a conversation with no turn id is never pinned either
    a.outcomes.append(RequestFailed("503"))
    plain = CompletionRequest(REQ.messages, model="chosen", session_id="s3")
    assert (await f.complete(plain)).text == "b"
    assert (await f.complete(plain)).text == "a"
    assert a.calls[-1].model == "chosen"


async def test_a_cooling_primary_is_skipped_by_the_next_turn(clock: FakeClock) -> None:
    f, a, _b, _ = three(clock)
    a.outcomes.extend([RequestFailed("503")] * 3)
    for i in range(3):
        req = CompletionRequest(REQ.messages, session_id="s1", turn_id=f"t{i}")
        assert (await f.complete(req)).text == "b"
    calls = len(a.calls)
    assert (await f.complete(CompletionRequest(REQ.messages, session_id="s1"))).text == "b"
    assert len(a.calls) == calls
    clock.advance(301)
    assert (await f.complete(CompletionRequest(REQ.messages, session_id="s1"))).text == "a"


async def test_an_unknown_model_the_user_chose_is_not_failed_over(clock: FakeClock) -> None:
    """A mistyped /model is the request's problem: raised, not hidden behind a fallback
    and not pinning the conversation there."""
    f, a, b, _ = three(clock)
    a.outcomes.append(ModelNotAvailable("The model `gpt-4o-mnii` does not exist"))
    typo = CompletionRequest(
        REQ.messages, model="gpt-4o-mnii", model_chosen=True, session_id="s1", turn_id="t1"
    )
    with pytest.raises(ModelNotAvailable):
        await f.complete(typo)
    a.outcomes.append([ModelNotAvailable("no such model")])
    with pytest.raises(ModelNotAvailable):
        _ = [i async for i in f.stream(replace(typo, turn_id="t2"))]
    assert b.calls == []
    assert (await f.complete(CompletionRequest(REQ.messages, session_id="s1"))).text == "a"
    # the operator's own model that a provider does not know is still failed over
    a.outcomes.append(ModelNotAvailable("404"))
    assert (await f.complete(CompletionRequest(REQ.messages, model="cfg"))).text == "b"


async def test_switching_mid_conversation_rewrites_orphaned_tool_results(clock: FakeClock) -> None:
    f, a, b, _ = three(clock)
    history = (
        ChatMessage("user", "find x"),
        ChatMessage("tool", "x is 42", tool_call_id="toolu_gone", name="search"),
        ChatMessage("assistant", "", (ToolCall("call_1", "search", {"q": "y"}),)),
        ChatMessage("tool", "y is 7", tool_call_id="call_1", name="search"),
    )
    req = CompletionRequest(history, session_id="s1")
    await f.complete(req)  # starts on a
    a.outcomes.extend([RequestFailed("500")] * 3)
    await f.complete(req)  # moves to b
    assert a.calls[0].messages == history  # untouched on the first provider
    sent = b.calls[0].messages
    assert sent[1] == ChatMessage("user", "[result of tool search]\nx is 42")
    assert sent[2].tool_calls[0].id == "call_1"  # matched pairs are kept
    assert sent[3].role == "tool"


async def test_stream_fails_over_before_text_only(clock: FakeClock) -> None:
    f, a, b, _ = three(clock)
    a.outcomes.append([RequestFailed("down")])
    items = [i async for i in f.stream(REQ)]
    assert items[-1] == Completion("b", provider="b:m")
    a.outcomes.append([TextDelta("partial"), RequestFailed("cut")])
    with pytest.raises(RequestFailed):
        _ = [i async for i in f.stream(CompletionRequest(REQ.messages, session_id="x"))]
    assert len(b.calls) == 1


def test_model_info_comes_from_the_provider_that_serves_the_model(clock: FakeClock) -> None:
    """An answer from a fallback is priced by that provider (its own table, its local
    flag), also when the server echoes a dated name of the configured model."""
    from agent_core.llm.base import ModelInfo

    local, cloud = ScriptedProvider("ollama:llama3.2"), ScriptedProvider("openai:gpt-4o")
    local.info = ModelInfo("llama3.2")  # free
    cloud.info = ModelInfo("gpt-4o", output_cost_per_token=0.00001)
    f = Failover([local, cloud], threshold=3, cooldown_secs=300, clock=clock)
    assert f.model_info("gpt-4o-2024-08-06").output_cost_per_token == 0.00001
    assert f.model_info("llama3.2").output_cost_per_token == 0.0
    assert f.model_info(None).name == "llama3.2"  # the primary's by default


async def test_the_whole_chain_over_the_wire_turns_back_to_the_primary(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    """build_provider's chain against a fake OpenAI server: a 503 moves one turn to the
    fallback model; the next turn asks the primary again with the /model choice; a
    mistyped /model (404 model_not_found) is raised, not answered by the fallback."""
    from agent_core.llm.factory import build_provider
    from tests.unit.llm.conftest import KEY, make_settings

    s = make_settings(
        llm_backend="openai",
        openai_api_key=KEY,
        openai_base_url=server.openai_url,
        llm_fallback_model="gpt-4o-mini",
        llm_max_retries=0,
    )
    chain = build_provider(s, sleep=clock.sleep, clock=clock)
    await chain.initialize()
    msgs = (ChatMessage("user", "implement a parser, please"),)
    first = CompletionRequest(msgs, model="gpt-4.1", model_chosen=True, session_id="s", turn_id="1")
    server.push(openai_error(503, "", "overloaded", kind="server_error"), openai_stream(["b"]))
    assert [i async for i in chain.stream(first)][-1].text == "b"
    server.push(openai_stream(["a"]))
    assert [i async for i in chain.stream(replace(first, turn_id="2"))][-1].text == "a"
    models = [r.body["model"] for r in server.requests if r.path.endswith("/completions")]
    assert models == ["gpt-4.1", "gpt-4o-mini", "gpt-4.1"]
    server.push(openai_error(404, "model_not_found", "The model `gpt-4.l` does not exist"))
    with pytest.raises(ModelNotAvailable):
        _ = [i async for i in chain.stream(replace(first, model="gpt-4.l", turn_id="3"))]
    models = [r.body["model"] for r in server.requests if r.path.endswith("/completions")]
    assert models[3:] == ["gpt-4.l"]  # no fallback call
    await chain.shutdown()


async def test_an_anthropic_account_out_of_credit_fails_over(server: FakeLLMServer) -> None:
    """Anthropic's "credit balance is too low" is a 400 invalid_request_error: a
    problem of the account, so the fallback answers (and were it the last provider,
    the user would read about the provider account, not about the history)."""
    no_credit = (
        "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
        "Billing to upgrade or purchase credits."
    )
    server.push(anthropic_error(400, "invalid_request_error", no_credit))
    primary = AnthropicProvider(config_for(server, "anthropic"), PriceTable())
    fallback = OpenAIProvider(config_for(server, "openai"), PriceTable())
    chain = Failover([primary, fallback])
    await chain.initialize()
    items = [i async for i in chain.stream(REQ)]
    assert isinstance(items[-1], Completion) and items[-1].text == "echo: hi"
    assert [r.path for r in server.requests] == ["/v1/messages", "/v1/chat/completions"]
    server.push(anthropic_error(400, "invalid_request_error", no_credit))
    with pytest.raises(AuthFailed, match="out of credit") as info:
        _ = [i async for i in primary.stream(REQ)]
    await chain.shutdown()
    notice = friendly_llm_error(info.value)
    assert "/new" not in notice and "history" not in notice
    assert "out of credit" in notice and "API key" not in notice  # the key is fine


async def test_a_rate_limited_primary_fails_over_and_is_left_alone_for_its_window(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    """build_provider's chain: a 429 (``Retry-After: 5``) from the primary moves the
    turn to the fallback model, as any transient error does; the next turn, inside
    those 5 s, goes to the fallback without a request to the primary; after them the
    primary is asked again."""
    from agent_core.llm.factory import build_provider
    from tests.unit.llm.conftest import KEY, make_settings

    s = make_settings(
        llm_backend="openai",
        openai_api_key=KEY,
        openai_base_url=server.openai_url,
        llm_fallback_model="gpt-4o-mini",
    )
    chain = build_provider(s, sleep=clock.sleep, clock=clock)
    await chain.initialize()
    server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=5))
    for turn in "12":
        out = await chain.complete(replace(REQ, turn_id=turn))
        assert out.text == "echo: hi"
    clock.advance(5)
    await chain.complete(replace(REQ, turn_id="3"))
    await chain.shutdown()
    models = [r.body["model"] for r in server.requests]
    assert models == ["gpt-4o", "gpt-4o-mini", "gpt-4o-mini", "gpt-4o"]
    assert clock.sleeps == []  # nobody waited: the fallback answered


async def test_calls_held_back_by_a_rate_limit_window_do_not_cool_the_provider_down(
    server: FakeLLMServer, clock: FakeClock
) -> None:
    """One 429 'Retry-After: 2' on the primary, then two more turns inside those
    2 s (held back unsent, answered by the fallback): the primary is asked again
    once the 2 s are over, not cooled down for LLM_FAILOVER_COOLDOWN_SECS by calls
    it never saw."""
    primary = OpenAIProvider(config_for(server), PriceTable(), clock=clock)
    fallback = OpenAIProvider(
        config_for(server, llm_model="gpt-4o-mini"), PriceTable(), clock=clock
    )
    fo = Failover([primary, fallback], threshold=3, cooldown_secs=300.0, clock=clock)
    await fo.initialize()
    server.push(openai_error(429, "rate_limit_exceeded", "slow down", retry_after=2))
    assert (await fo.complete(REQ)).text == "echo: hi"
    assert (await fo.complete(REQ)).text == "echo: hi"
    items = [i async for i in fo.stream(REQ)]
    assert isinstance(items[-1], Completion) and items[-1].text == "echo: hi"
    clock.advance(2.5)
    assert not fo.cooling(0)
    assert (await fo.complete(REQ)).text == "echo: hi"
    await fo.shutdown()
    models = [r.body["model"] for r in server.requests]
    assert models == ["gpt-4o", "gpt-4o-mini", "gpt-4o-mini", "gpt-4o-mini", "gpt-4o"]
