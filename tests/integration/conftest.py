"""Runtime fixtures: a real Runtime on the test Valkey, with any LLM."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import redis.asyncio.connection as rconn

from agent_core.llm.base import LLMProvider
from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings
from agent_core.store.embedded import EmbeddedValkey
from agent_core.store.multiplex import Multiplexer
from bots.runtime import Runtime
from bots.settings import Settings
from channels.web.channel import WebSettings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_settings(
    valkey: EmbeddedValkey, *, llm: dict[str, Any] | None = None, **core: Any
) -> Settings:
    core.setdefault("sweep_interval_secs", 0.2)
    return Settings(
        core=CoreSettings(redis_url=valkey.url, **core),  # type: ignore[arg-type]
        llm=LLMSettings(**(llm or {"llm_backend": "demo"})),
        web=WebSettings(web_chat_enabled=True),
    )


@pytest.fixture
async def runtime(valkey: EmbeddedValkey, redis: Any) -> AsyncIterator[Callable[..., Any]]:
    """``async with runtime(role, llm=provider, **core) as rt`` -> a served Runtime."""
    started: list[tuple[Runtime, asyncio.Event, asyncio.Task[None]]] = []

    @contextlib.asynccontextmanager
    async def make(
        role: str = "all",
        *,
        llm: LLMProvider | None = None,
        llm_settings: dict[str, Any] | None = None,
        serve_web: bool = False,
        **core: Any,
    ) -> AsyncIterator[Runtime]:
        settings = make_settings(valkey, llm=llm_settings, **core)
        async with Runtime(settings, role, llm=llm) as rt:
            stop = asyncio.Event()
            port = free_port()
            rt.port = port  # type: ignore[attr-defined]
            if serve_web:
                task = asyncio.create_task(rt.serve(stop, host="127.0.0.1", port=port))
            else:
                assert rt.worker is not None
                task = asyncio.create_task(rt.worker.run(stop))
            started.append((rt, stop, task))
            try:
                yield rt
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)

    yield make


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A real Runtime with its worker running, and a client for its web app (where the
    platform fakes' webhooks post); the worker drains on the way out."""
    async with Runtime(settings, "all") as rt:
        stop = asyncio.Event()
        task = asyncio.create_task(rt.worker.run(stop))  # type: ignore[union-attr]
        try:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=rt.web_app()), base_url="http://p"
            ) as client:
                yield client
        finally:
            stop.set()
            await task


@pytest.fixture
def packets(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Every packet redis-py sends from now on (one per command, one per pipeline:
    one per round trip) and every round trip on a shared connection
    (``multiplex.py``), by the first command's name."""
    counts: collections.Counter[str] = collections.Counter()
    original = rconn.AbstractConnection.send_packed_command

    async def counting(self: Any, command: Any, check_health: bool = True) -> None:
        first = bytes(command[0] if isinstance(command, list | tuple) else command)
        parts = first[:48].split(b"\r\n")
        counts[parts[2].decode(errors="replace") if len(parts) > 2 else "?"] += 1
        await original(self, command, check_health)

    monkeypatch.setattr(rconn.AbstractConnection, "send_packed_command", counting)
    shared = Multiplexer.roundtrip

    async def counting_shared(self: Multiplexer, commands: Any) -> list[Any]:
        name = commands[0][0]
        counts[name.decode() if isinstance(name, bytes) else str(name)] += 1
        return await shared(self, commands)

    monkeypatch.setattr(Multiplexer, "roundtrip", counting_shared)
    return counts
