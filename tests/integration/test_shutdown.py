"""SIGTERM: stop taking work, finish the turn in hand, exit 0 well inside Heroku's 30 s."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from agent_core.store.embedded import EmbeddedValkey
from tests.fakes.llm_servers import FakeLLMServer
from tests.integration.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


async def test_sigterm_mid_turn_finishes_the_turn_and_exits(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    async with FakeLLMServer(latency=2.0) as llm:
        port = free_port()
        env = {
            k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET"))
        }
        env.update(
            PARLEY_ENV_FILE="/nonexistent/.env",
            REDIS_URL=valkey.url,
            PORT=str(port),
            HOST="127.0.0.1",
            LLM_BACKEND="openai_compatible",
            LLM_BASE_URL=llm.openai_url,
            LLM_MODEL="fake",
            WEB_CHAT_ENABLED="true",
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bots.cli",
            "run",
            env=env,
            cwd=ROOT,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
                for _ in range(100):
                    try:
                        if (await client.get("/readyz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.1)
                await client.get("/")
                r = await client.post("/api/messages", json={"text": "finish me"})
                assert r.status_code == 202
                for _ in range(100):  # wait until the LLM call is in flight
                    if llm.requests:
                        break
                    await asyncio.sleep(0.05)
                assert llm.requests, "the turn never reached the LLM"
                t0 = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                code = await asyncio.wait_for(proc.wait(), 25)
                elapsed = time.monotonic() - t0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert code == 0, (await proc.stderr.read()).decode() if proc.stderr else ""
        assert elapsed < 25
    # the in-flight turn finished and its answer is in the transcript
    keys = [k async for k in redis.scan_iter("parley:{web:*}:out")]
    assert len(keys) == 1
    entries = await redis.xrange(keys[0])
    texts = [f[b"m"] for _, f in entries if f.get(b"t") in (b"message", b"edit")]
    assert any(b"echo: finish me" in t for t in texts)
    # nothing left queued: an emptied mailbox list no longer exists
    assert [k async for k in redis.scan_iter("parley:{web:*}:mailbox")] == []
