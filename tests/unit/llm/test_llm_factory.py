"""The factory: chain order, backend choice, config errors, the start-up line."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from agent_core.errors import ConfigError
from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.base import ChatMessage, CompletionRequest, LLMProvider
from agent_core.llm.breaker import CircuitBreaker
from agent_core.llm.cache import ResponseCache
from agent_core.llm.config import backend_config
from agent_core.llm.demo import DemoProvider
from agent_core.llm.errors import CircuitOpen
from agent_core.llm.factory import build_provider, describe
from agent_core.llm.failover import Failover
from agent_core.llm.ollama import OllamaProvider
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.retry import Retry
from agent_core.llm.routing import SmartRouting
from agent_core.llm.settings import LLMSettings
from agent_core.settings import load
from tests.fakes.llm_servers import FakeClock, FakeLLMServer, openai_error
from tests.unit.llm.conftest import KEY, make_settings


def chain(p: LLMProvider) -> list[type]:
    out: list[type] = []
    cur: object = p
    while True:
        out.append(type(cur))
        inner = getattr(cur, "inner", None)
        if inner is None:
            break
        cur = inner
    if isinstance(cur, Failover):
        out.extend(type(x) for x in cur.providers)
    return out


def test_chain_order_with_everything_on(redis: Redis) -> None:
    s = make_settings(
        llm_backend="openai",
        openai_api_key=KEY,
        response_cache_enabled=True,
        llm_fallbacks="anthropic:claude-3-5-haiku-latest,ollama",
        llm_cheap_model="gpt-4o-mini",
        anthropic_api_key=KEY,
    )
    p = build_provider(s, redis)
    assert chain(p) == [
        SmartRouting,
        Retry,
        CircuitBreaker,
        ResponseCache,
        Failover,
        OpenAIProvider,
        AnthropicProvider,
        OllamaProvider,
    ]


def test_chain_without_cache_or_fallbacks() -> None:
    p = build_provider(
        make_settings(llm_backend="openai", openai_api_key=KEY, response_cache_enabled=True)
    )
    assert chain(p) == [SmartRouting, Retry, CircuitBreaker, OpenAIProvider]


def test_fallback_model_on_the_same_backend() -> None:
    s = make_settings(llm_backend="openai", openai_api_key=KEY, llm_fallback_model="gpt-4o-mini")
    p = build_provider(s)
    failover = p.inner.inner.inner  # type: ignore[attr-defined]
    assert isinstance(failover, Failover)
    assert [x.name for x in failover.providers] == ["openai:gpt-4o", "openai:gpt-4o-mini"]


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        ({"llm_backend": "openai"}, "OPENAI_API_KEY: required when LLM_BACKEND=openai"),
        ({"llm_backend": "claude"}, "ANTHROPIC_API_KEY: required when LLM_BACKEND=anthropic"),
        (
            {"llm_backend": "compatible", "llm_model": "m"},
            "LLM_BASE_URL: required when LLM_BACKEND=openai_compatible (the server's URL)",
        ),
        (
            {"llm_backend": "groq", "llm_model": "llama-3.1-8b-instant"},
            "GROQ_API_KEY: required when LLM_BACKEND=groq",
        ),
    ],
)
def test_missing_key_is_a_config_error(kw: dict[str, str], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_provider(make_settings(**kw))
    assert line in info.value.problems


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        # LLM_BACKEND unset: the line names the variable that chose the backend
        (
            {"openrouter_api_key": KEY},
            "LLM_MODEL: required when OPENROUTER_API_KEY is set (the openrouter preset)",
        ),
        (
            {"llm_base_url": "https://host/v1", "llm_api_key": KEY},
            "LLM_MODEL: required when LLM_BASE_URL is set (the openai_compatible backend)",
        ),
        (
            {"llm_api_key": KEY},
            "LLM_BASE_URL: required when LLM_API_KEY is set (the openai_compatible backend)",
        ),
        # LLM_BACKEND set: it is named
        ({"llm_backend": "groq", "groq_api_key": KEY}, "LLM_MODEL: required when LLM_BACKEND=groq"),
        # a fallback on another backend: LLM_FALLBACKS is named
        (
            {"openai_api_key": KEY, "llm_fallbacks": "together"},
            "LLM_MODEL: required for the together fallback (LLM_FALLBACKS)",
        ),
    ],
)
def test_a_missing_setting_names_what_chose_the_backend(kw: dict[str, str], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_provider(make_settings(**kw))
    assert any(p.startswith(line) for p in info.value.problems), info.value.problems
    assert not any("LLM_BACKEND=" in p for p in info.value.problems if "llm_backend" not in kw)


def test_bad_settings_are_readable() -> None:
    with pytest.raises(ConfigError) as info:
        load(LLMSettings, _env_file=None, llm_backend="gemini")
    assert info.value.problems[0].startswith("LLM_BACKEND: unknown backend 'gemini'")
    with pytest.raises(ConfigError, match="LLM_EXTRA_HEADERS"):
        load(LLMSettings, _env_file=None, llm_extra_headers="novalue")
    with pytest.raises(ConfigError, match="LLM_FALLBACKS"):
        load(LLMSettings, _env_file=None, llm_fallbacks="nosuch:model")


def test_backend_choice_aliases_and_presets(monkeypatch: pytest.MonkeyPatch) -> None:
    assert make_settings(llm_backend="CLAUDE").llm_backend == "anthropic"
    assert make_settings(llm_backend="Compatible").llm_backend == "openai_compatible"
    assert make_settings().resolve_backend() == ("demo", "no LLM_BACKEND and no API key set")
    assert make_settings(anthropic_api_key=KEY).resolve_backend()[0] == "anthropic"
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    cfg = backend_config(make_settings(llm_backend="openrouter", llm_model="openai/gpt-4o"))
    assert (cfg.kind, cfg.base_url, cfg.api_key) == ("openai", "https://openrouter.ai/api/v1", KEY)
    ollama = backend_config(make_settings(llm_backend="ollama"))
    assert (ollama.model, ollama.base_url, ollama.local) == (
        "llama3.2",
        "http://localhost:11434",
        True,
    )


def test_describe_never_shows_a_key() -> None:
    s = make_settings(
        llm_backend="openai_compatible",
        llm_base_url="https://host/v1",
        llm_model="gpt-4o-mini",
        llm_api_key=KEY,
    )
    line = describe(s)
    assert line == "openai_compatible (gpt-4o-mini at https://host/v1; LLM_BACKEND is set)"
    assert describe(make_settings()).startswith("demo (")
    assert describe(make_settings(openai_api_key=KEY)) == (
        "openai (gpt-4o at https://api.openai.com/v1; OPENAI_API_KEY is set)"
    )
    bad = describe(make_settings(llm_backend="openai"))
    assert "OPENAI_API_KEY: required" in bad
    full = describe(
        make_settings(llm_backend="openai", openai_api_key=KEY, llm_cheap_model="gpt-4o-mini")
    )
    assert "cheap model gpt-4o-mini" in full and KEY not in full


async def test_demo_backend() -> None:
    p = build_provider(make_settings(llm_backend="demo"))
    assert isinstance(p.inner.inner.inner, DemoProvider)  # type: ignore[attr-defined]
    await p.initialize()
    out = await p.complete(CompletionRequest((ChatMessage("user", "hello"),)))
    await p.shutdown()
    assert out.text


async def test_end_to_end_failover_between_real_servers() -> None:
    async with FakeLLMServer() as primary, FakeLLMServer() as backup:
        primary.push(openai_error(401, "invalid_api_key", "bad key"))
        s = make_settings(
            llm_backend="openai",
            openai_api_key=KEY,
            openai_base_url=primary.openai_url,
            llm_base_url=backup.openai_url,
            llm_fallbacks="openai_compatible:backup-model",
        )
        p = build_provider(s)
        await p.initialize()
        out = await p.complete(CompletionRequest((ChatMessage("user", "hi"),)))
        streamed = [i async for i in p.stream(CompletionRequest((ChatMessage("user", "yo"),)))]
        await p.shutdown()
    assert out.text == "echo: hi"
    assert out.provider == "openai_compatible:backup-model"
    assert backup.requests[0].body["model"] == "backup-model"
    assert streamed[-1].text == "echo: yo"


async def test_whole_chain_retries_on_a_fake_clock_then_opens_the_circuit() -> None:
    clock = FakeClock()
    async with FakeLLMServer() as srv:
        srv.push(
            openai_error(500, "server_error", "boom"),
            openai_error(429, "rate_limit_exceeded", "slow", retry_after=3),
        )
        s = make_settings(
            llm_backend="openai",
            openai_api_key=KEY,
            openai_base_url=srv.openai_url,
            circuit_breaker_threshold=3,
        )
        p = build_provider(s, sleep=clock.sleep, clock=clock)
        assert isinstance(p, LLMProvider)
        await p.initialize()
        out = await p.complete(CompletionRequest((ChatMessage("user", "hi"),)))
        assert out.text == "echo: hi"
        assert 0.75 <= clock.sleeps[0] <= 1.25 and clock.sleeps[1] == 3.0
        srv.push(*[openai_error(503, "", "down")] * 10)
        with pytest.raises(CircuitOpen):
            await p.complete(CompletionRequest((ChatMessage("user", "hi"),)))
        assert len(srv.requests) == 3 + 3  # the 4th try was stopped by the breaker
        await p.shutdown()
