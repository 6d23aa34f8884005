"""REDIS_MAX_CONNECTIONS / REDIS_MAX_BLOCKING_CONNECTIONS: what one process may open
to Redis, and `parley doctor` comparing it with the server's maxclients (a Heroku
Redis plan accepts 20 to 65,000 connections)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ResponseError

from agent_core.errors import ConfigError
from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings, load
from agent_core.store.client import make_clients, server_max_clients
from agent_core.store.embedded import EmbeddedValkey
from bots.ops import doctor
from bots.runtime import Runtime
from bots.settings import Settings
from channels.web.channel import WebSettings


def _settings(valkey: EmbeddedValkey, **core: Any) -> Settings:
    return Settings(
        core=CoreSettings(redis_url=valkey.url, **core),  # type: ignore[arg-type]
        llm=LLMSettings(llm_backend="demo"),
        web=WebSettings(web_chat_enabled=False),
    )


async def _connected(redis: Any) -> int:
    return int((await redis.info("clients"))["connected_clients"])


async def _burst(clients: Any) -> None:
    """40 commands that each hold a pooled connection 0.2 s, 10 blocking reads."""
    await asyncio.gather(
        *(clients.redis.blpop([f"parley:test:empty:{i}"], timeout=0.2) for i in range(40)),
        *(clients.blocking.xread({"parley:test:none": "$"}, block=200) for _ in range(10)),
    )


def test_the_defaults_keep_the_pools_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_MAX_CONNECTIONS", "REDIS_MAX_BLOCKING_CONNECTIONS"):
        monkeypatch.delenv(name, raising=False)
    core = load(CoreSettings)
    assert (core.redis_max_connections, core.redis_max_blocking_connections) == (200, 1000)
    monkeypatch.setenv("REDIS_MAX_CONNECTIONS", "0")
    with pytest.raises(ConfigError) as exc:
        load(CoreSettings)
    assert exc.value.problems[0].startswith("REDIS_MAX_CONNECTIONS:")


async def test_the_settings_cap_the_connections_a_process_opens(
    valkey: EmbeddedValkey, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_MAX_CONNECTIONS", "3")
    monkeypatch.setenv("REDIS_MAX_BLOCKING_CONNECTIONS", "2")
    core = load(CoreSettings, redis_url=valkey.url)
    s = Settings(core=core, llm=LLMSettings(llm_backend="demo"), web=WebSettings())
    before = await _connected(redis)
    async with Runtime(s, "web") as rt:
        assert rt.clients is not None
        assert rt.clients.redis.connection_pool.max_connections == 3
        assert rt.clients.blocking.connection_pool.max_connections == 2
        await _burst(rt.clients)  # waits for free connections instead of opening more
        # both pools, and the one connection the hot path's round trips share
        assert await _connected(redis) - before <= 3 + 2 + 1


async def test_uncapped_the_same_burst_opens_a_connection_per_command(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    before = await _connected(redis)
    clients = make_clients(valkey.url)
    try:
        await _burst(clients)
        assert await _connected(redis) - before >= 40
    finally:
        await clients.close()


async def test_server_max_clients_from_info_or_config_or_unknown(redis: Any) -> None:
    assert await server_max_clients(redis) == 10000  # Valkey's INFO clients says it

    class Managed:  # an older server's INFO, and CONFIG refused (managed Redis)
        async def info(self, section: str) -> dict[str, Any]:
            return {"connected_clients": 3}

        async def config_get(self, name: str) -> dict[str, Any]:
            raise ResponseError("unknown command 'CONFIG'")

    assert await server_max_clients(Managed()) is None

    class Older(Managed):
        async def config_get(self, name: str) -> dict[str, Any]:
            return {"maxclients": "40"}

    assert await server_max_clients(Older()) == 40


async def test_doctor_warns_when_the_processes_may_open_more_than_the_server_accepts(
    valkey: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a server that accepts 40 (Heroku's premium-0), without lowering the shared test
    # server's own limit (reading it is tested above)
    async def premium_0(_redis: Any) -> int:
        return 40

    monkeypatch.setattr("bots.ops.server_max_clients", premium_0)
    checks = {c.name: c for c in await doctor(_settings(valkey))}
    row = checks["redis connections"]
    assert not row.ok
    assert "accepts 40" in row.detail and "1,201" in row.detail, row.detail
    assert "REDIS_MAX_CONNECTIONS" in row.fix

    capped = _settings(valkey, redis_max_connections=6, redis_max_blocking_connections=2)
    row = {c.name: c for c in await doctor(capped)}["redis connections"]
    assert row.ok, row
    assert "accepts 40" in row.detail and "9 " in row.detail, row.detail


async def _refused_line(url: str) -> str:
    from agent_core.store.client import check_reachable

    clients = make_clients(url)
    try:
        with pytest.raises(ConfigError) as err:
            await check_reachable(clients)
    finally:
        await clients.close()
    [line] = err.value.problems
    return line


async def test_a_host_that_never_accepts_reports_the_connect_error_not_no_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start-up PING's bound wrapped the connect, so a connect taking longer
    than it (SOCKET_TIMEOUT an attempt, times the attempts if redis-py retries)
    said "no answer in 10 s" without the connect error and its hint.  Scaled down:
    a blackholed connect times out after 0.5 s, PING_TIMEOUT is 0.3 s."""
    import redis.asyncio.connection as rconn

    from agent_core.store import client

    async def blackholed(self: Any) -> None:
        await asyncio.sleep(0.5)
        raise TimeoutError

    monkeypatch.setattr(client, "PING_TIMEOUT", 0.3)
    monkeypatch.setattr(rconn.Connection, "_connect", blackholed)
    line = await _refused_line("redis://192.0.2.1:6379")
    assert "Timeout connecting to server" in line and "no answer" not in line, line
    assert "unset REDIS_URL" in line or "heroku" in line, line


async def test_a_server_that_accepts_but_never_answers_is_no_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent_core.store import client

    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read()  # never answers

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setattr(client, "PING_TIMEOUT", 0.3)
    try:
        line = await _refused_line(f"redis://:pw@127.0.0.1:{port}")  # AUTH, then PING
    finally:
        server.close()
    assert "no answer in 0.3 s" in line, line
