"""End to end: web chat -> Ingest -> stream -> worker -> fake OpenAI-compatible server -> browser."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import orjson

from tests.fakes.llm_servers import FakeLLMServer
from tests.integration.inbox import ever_published


async def _wait_history(
    client: httpx.AsyncClient, pred: Any, timeout: float = 10.0
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    msgs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        msgs = (await client.get("/api/history")).json()["messages"]
        if pred(msgs):
            return msgs
        await asyncio.sleep(0.05)
    raise AssertionError(f"history never matched: {msgs}")


async def test_web_message_reaches_the_llm_and_the_answer_streams_back(runtime: Any) -> None:
    async with FakeLLMServer() as llm:
        settings = {
            "llm_backend": "openai_compatible",
            "llm_base_url": llm.openai_url,
            "llm_model": "fake-model",
        }
        async with runtime("all", llm_settings=settings, serve_web=True) as rt:
            base = f"http://127.0.0.1:{rt.port}"
            await asyncio.sleep(0.3)
            async with httpx.AsyncClient(base_url=base, timeout=10) as client:
                page = await client.get("/")
                assert page.status_code == 200 and "Parley" in page.text
                assert "parley_web" in client.cookies
                # follow the live stream while sending
                events: list[dict[str, Any]] = []

                async def follow() -> None:
                    async with client.stream("GET", "/api/events") as resp:
                        assert resp.headers["content-type"].startswith("text/event-stream")
                        async for line in resp.aiter_lines():
                            if line.startswith("data: "):
                                events.append(orjson.loads(line[6:]))
                                if events[-1].get("t") == "done":
                                    return

                follower = asyncio.create_task(follow())
                await asyncio.sleep(0.2)
                r = await client.post("/api/messages", json={"text": "hello parley"})
                assert r.status_code == 202, r.text
                await asyncio.wait_for(follower, 10)
                texts = [e["m"]["tx"] for e in events if e["t"] in ("message", "edit")]
                assert texts[-1] == "echo: hello parley"
                assert any(e["t"] == "user" for e in events)
                # the fake saw the real wire format, streaming, with our history
                req = llm.requests[-1]
                assert req.path == "/v1/chat/completions"
                assert req.body["stream"] is True
                assert req.body["messages"][-1] == {"role": "user", "content": "hello parley"}
                # a refresh replays the transcript
                msgs = await _wait_history(client, lambda m: len(m) >= 2)
                assert msgs[0]["kind"] == "user" and msgs[0]["tx"] == "hello parley"
                assert msgs[-1]["tx"] == "echo: hello parley"


async def test_bad_bodies_get_4xx_and_publish_nothing(runtime: Any, redis: Any) -> None:
    async with runtime("all", serve_web=True) as rt:
        base = f"http://127.0.0.1:{rt.port}"
        await asyncio.sleep(0.3)
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            # no session cookie yet
            assert (await client.post("/api/messages", json={"text": "x"})).status_code == 400
            await client.get("/")
            cases = [
                (b"not json", 400),
                (b"[1,2]", 400),
                (b'{"text": 5}', 400),
                (b'{"text": "   "}', 400),
                (orjson.dumps({"text": "x" * 20_000}), 413),
                (b"{" + b" " * 300_000 + b"}", 413),
                # past the characters, however escaped: the limit is named, not the bytes
                (json.dumps({"text": "\U0001f600" * 16_001}).encode(), 413),
            ]
            for body, status in cases:
                r = await client.post(
                    "/api/messages", content=body, headers={"content-type": "application/json"}
                )
                assert r.status_code == status, (body[:20], r.status_code)
                if body.startswith(b'{"text": "\\ud83d'):
                    assert r.json()["error"] == "message longer than 16000 characters"
            r = await client.post("/api/actions", json={"token": "é" * 10})
            assert r.status_code == 400
            r = await client.get("/api/events", params={"after": "nonsense"})
            assert r.status_code == 400
    assert await ever_published(redis) == 0


async def test_a_long_emoji_message_escaped_by_its_client_is_taken(
    runtime: Any, redis: Any
) -> None:
    """16,000 characters are allowed; a client that escapes non-ASCII (Python's
    json, many HTTP libraries) sends an emoji as twelve bytes, and the 64 KiB body
    cap answered "body too large" at 5,400 emoji."""
    async with (
        runtime("all", serve_web=True) as rt,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{rt.port}", timeout=10) as c,
    ):
        await asyncio.sleep(0.3)  # the server starting, as above
        await c.get("/")
        body = json.dumps({"text": "\U0001f600" * 16_000}).encode()
        assert len(body) > 190_000
        r = await c.post(
            "/api/messages", content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 202, r.text
    assert await ever_published(redis) == 1


async def test_web_chat_token_is_required_when_set(runtime: Any, monkeypatch: Any) -> None:
    async with runtime("all", serve_web=True) as rt:
        from pydantic import SecretStr

        rt.channels["web"].settings.web_chat_token = SecretStr("let-me-in")
        base = f"http://127.0.0.1:{rt.port}"
        await asyncio.sleep(0.3)
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            await client.get("/")
            assert (await client.get("/api/me")).json()["needs_token"] is True
            assert (await client.post("/api/messages", json={"text": "hi"})).status_code == 401
            assert (await client.post("/api/login", json={"token": "wrong"})).status_code == 403
            assert (await client.post("/api/login", json={"token": "let-me-in"})).status_code == 200
            assert (await client.post("/api/messages", json={"text": "hi"})).status_code == 202


async def test_health_and_readiness(runtime: Any) -> None:
    async with runtime("all", serve_web=True) as rt:
        base = f"http://127.0.0.1:{rt.port}"
        await asyncio.sleep(0.3)
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            assert (await client.get("/healthz")).json()["ok"] is True
            r = await client.get("/readyz")
            assert r.status_code == 200, r.text
            rt.draining = True
            assert (await client.get("/readyz")).status_code == 503
