"""Fixtures for the LLM tests: a fake LLM server per test, settings without env."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent_core.llm.config import BackendConfig, backend_config
from agent_core.llm.settings import LLMSettings
from tests.fakes.llm_servers import FakeClock, FakeLLMServer

KEY = "sk-test-SECRETSECRETSECRET1234"


def make_settings(**kw: Any) -> LLMSettings:
    """LLMSettings from keyword arguments only (never the environment's .env)."""
    return LLMSettings(_env_file=None, **kw)


def config_for(server: FakeLLMServer, backend: str = "openai", **kw: Any) -> BackendConfig:
    if backend == "openai":
        s = make_settings(
            llm_backend="openai", openai_api_key=KEY, openai_base_url=server.openai_url, **kw
        )
    elif backend == "anthropic":
        s = make_settings(
            llm_backend="anthropic", anthropic_api_key=KEY, anthropic_base_url=server.url, **kw
        )
    elif backend == "ollama":
        s = make_settings(llm_backend="ollama", ollama_base_url=server.url, **kw)
    else:
        s = make_settings(
            llm_backend="openai_compatible",
            llm_base_url=server.openai_url,
            llm_model=kw.pop("llm_model", "fake-model"),
            **kw,
        )
    return backend_config(s)


@pytest.fixture
async def server() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as srv:
        yield srv


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
