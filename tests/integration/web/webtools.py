"""Helpers shared by the web chat's server and browser tests."""

from __future__ import annotations

import asyncio
import time

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
