"""Helpers shared by the web chat's server and browser tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx


async def wait_up(port: int, timeout: float = 10.0) -> None:
    """Until the runtime's web server answers (it starts in a task)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=1) as probe:
        while True:
            try:
                await probe.get(f"http://127.0.0.1:{port}/healthz")
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def client_for(rt: Any, **kw: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the runtime's web server, once it answers."""
    await wait_up(rt.port)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{rt.port}", timeout=10, **kw
    ) as client:
        yield client
