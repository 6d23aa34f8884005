"""Shared helpers for the approval end-to-end tests of the platform channels.

Every test runs one or more real :class:`bots.runtime.Runtime` objects (with
the offline demo model) on the session's test Valkey, against a channel's fake
platform server.  "demo an approval" makes the demo model call the
``demo_approval`` tool, which always asks first; each time it runs it appends
one note to the thread's ``…:demo`` Redis list, which is how the tests count
runs without trusting any message text.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any

from redis.asyncio import Redis

from agent_core.llm.demo import DemoProvider
from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings, ParleySettings
from agent_core.store import keys
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from bots.settings import Settings
from channels.web.channel import WebSettings

ASK = "demo an approval"
RAN = "demo action ran"  # the demo model's words after the tool ran


def settings_for(
    valkey: EmbeddedValkey,
    name: str,
    platform: ParleySettings,
    module: ModuleType,
    *,
    approval_ttl_secs: int | None = None,
    **core: Any,
) -> Settings:
    """Settings with one platform enabled, DM_POLICY=open, GROUP_POLICY=open, the demo model."""
    core.setdefault("sweep_interval_secs", 0.2)
    core.setdefault("shutdown_grace_secs", 5.0)
    core.setdefault("group_policy", "open")
    core_settings = CoreSettings(
        redis_url=valkey.url,  # type: ignore[arg-type]
        public_url="https://parley.example",
        dm_policy="open",
        **core,
    )
    if approval_ttl_secs is not None:
        # APPROVAL_TTL_SECS has a floor of 10 s for operators; the tests want it
        # short, so the validated settings are copied with the field replaced.
        core_settings = core_settings.model_copy(update={"approval_ttl_secs": approval_ttl_secs})
    return Settings(
        core=core_settings,
        llm=LLMSettings(llm_backend="demo"),
        web=WebSettings(web_chat_enabled=False),
        platforms={name: platform},
        modules={name: module},
    )


@contextlib.asynccontextmanager
async def process(settings: Settings, role: str, llm: Any = None) -> AsyncIterator[Runtime]:
    """A Runtime of ``role`` doing its work in the background until the block ends.

    ``all`` runs the worker only (webhooks are posted to :meth:`Runtime.web_app`
    through an ASGI transport); ``web`` runs nothing in the background (same);
    ``worker`` and ``gateway`` run :meth:`Runtime.serve` as ``parley run`` does.
    Leaving the block stops it the way SIGTERM does (drain, then close).  ``llm``:
    the model (default: the demo).
    """
    async with Runtime(settings, role, llm=llm or DemoProvider()) as rt:
        stop = asyncio.Event()
        task: asyncio.Task[None] | None = None
        if role == "all":
            assert rt.worker is not None
            task = asyncio.create_task(rt.worker.run(stop), name="test-worker")
        elif role in ("worker", "gateway"):
            task = asyncio.create_task(
                rt.serve(stop, host="127.0.0.1", port=0), name=f"test-{role}"
            )
        try:
            yield rt
        finally:
            stop.set()
            if task is not None:
                await asyncio.wait_for(task, 30)


async def wait_until(pred: Callable[[], Any], timeout: float = 8.0, what: str = "condition") -> Any:
    """Poll ``pred`` (sync or async) until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.03)


async def turn_finished(rt: Runtime) -> None:
    """Until the worker of ``rt`` runs no thread (the prompt's turn is complete).

    A prompt shows before its turn's completion script ran; a press handed off in
    the instant between that script and the thread task's end is not run until the
    lock expires (see test_worker_respawn_race.py), so presses wait for this.
    """
    worker = rt.worker
    assert worker is not None
    await wait_until(lambda: not worker.running, what="the turn to finish")


async def demo_runs(redis: Redis) -> int:
    """How many times ``demo_approval`` ran, over every thread."""
    total = 0
    async for key in redis.scan_iter(match=f"{keys.PREFIX}*:demo"):
        total += int(await redis.llen(key))
    return total


async def approval_ids(redis: Redis) -> list[str]:
    """Redis keys of every approval hash."""
    return [
        k.decode() if isinstance(k, bytes) else str(k)
        async for k in redis.scan_iter(match=f"{keys.PREFIX}*:approval:*")
    ]


async def wait_expired(redis: Redis) -> None:
    """Until the clock is past the expiry of every stored approval."""
    found = await wait_until(lambda: approval_ids(redis), what="the approval in Redis")
    exps = []
    for key in found:
        raw = await redis.hget(key, "exp")
        assert raw is not None, key
        exps.append(int(raw) / 1000)
    await wait_until(lambda: time.time() > max(exps) + 0.05, timeout=15, what="the approval expiry")


async def settle(seconds: float = 0.4) -> None:
    """Room for a (wrong) second action to show after the expected one."""
    await asyncio.sleep(seconds)


__all__ = [
    "ASK",
    "RAN",
    "approval_ids",
    "demo_runs",
    "process",
    "settings_for",
    "settle",
    "turn_finished",
    "wait_expired",
    "wait_until",
]
