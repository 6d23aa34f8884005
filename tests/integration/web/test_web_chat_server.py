"""The web chat's HTTP side: sessions, /new, security headers, idempotent sends, refusals."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from channels.web.channel import WebSettings, status
from tests.integration.inbox import ever_published
from tests.integration.web.webtools import wait_up


async def _history(client: httpx.AsyncClient, pred: Any, timeout: float = 10.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    msgs: list[Any] = []
    while time.monotonic() < deadline:
        msgs = (await client.get("/api/history")).json()["messages"]
        if pred(msgs):
            return msgs
        await asyncio.sleep(0.05)
    raise AssertionError(f"history never matched: {msgs}")


@contextlib.asynccontextmanager
async def _client(rt: Any) -> AsyncIterator[httpx.AsyncClient]:
    await wait_up(rt.port)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rt.port}", timeout=10) as client:
        yield client


async def test_every_response_carries_the_security_headers(runtime: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        for path in ("/", "/static/app.js", "/static/style.css", "/api/me", "/api/history"):
            r = await client.get(path)
            assert r.status_code == 200, path
            csp = r.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
            assert "frame-ancestors 'none'" in csp
            assert r.headers["x-content-type-options"] == "nosniff", path
        page = (await client.get("/")).text
        assert "<script>" not in page and " on" + "click=" not in page  # no inline script
        r = await client.post("/api/messages", json={"text": "x"})  # errors too
        assert r.headers["x-content-type-options"] == "nosniff"


async def test_the_page_links_its_script_and_stylesheet_by_their_content(runtime: Any) -> None:
    """A browser that cached an older app.js must fetch the new one: the page (never
    cached) links each file with a version taken from its content."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        page = (await client.get("/")).text
        for name in ("app.js", "style.css"):
            body = (await client.get(f"/static/{name}")).content
            digest = hashlib.sha256(body).hexdigest()[:12]
            assert f'"/static/{name}?v={digest}"' in page, (name, page)


async def test_new_gives_the_browser_a_fresh_thread_and_leaves_the_old_one(
    runtime: Any, redis: Any
) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        senders: list[str] = []  # who sent what the web process published

        async def note_sender(event: Any) -> str | None:
            senders.append(event.user_id)
            return None

        assert rt.ingest is not None
        rt.ingest.add_filter(note_sender)
        await client.get("/")
        old_thread = (await client.get("/api/me")).json()["thread"]
        r = await client.post("/api/messages", json={"text": "remember pineapple"})
        assert r.json()["thread"] == old_thread
        await _history(client, lambda m: len(m) >= 2)

        r = await client.post("/api/messages", json={"text": "/new"})
        assert r.status_code == 202, r.text
        new_thread = r.json()["thread"]
        assert new_thread != old_thread
        assert (await client.get("/api/me")).json()["thread"] == new_thread  # cookie rotated
        msgs = await _history(client, lambda m: len(m) >= 2)
        assert [m["kind"] for m in msgs] == ["user", "message"]
        assert msgs[0]["tx"] == "/new"
        assert "Started a new conversation" in msgs[1]["tx"]
        assert not any("pineapple" in m["tx"] for m in msgs)
        # the old transcript is still there, untouched
        assert await redis.xlen(f"parley:{{{old_thread}}}:out") >= 2
        # the same browser (uid) sent both: one user across conversations
        assert len(senders) == 2 and len(set(senders)) == 1, senders
        assert await ever_published(redis) == 2


async def test_a_client_chosen_id_makes_a_resend_harmless(runtime: Any, redis: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        await client.get("/")
        before = client.cookies["parley_web"]
        body = {"text": "only once", "id": "abcdef0123456789"}
        first = await client.post("/api/messages", json=body)
        again = await client.post("/api/messages", json=body)
        assert first.json()["result"] == "accepted"
        assert again.status_code == 202 and again.json()["result"] == "duplicate"
        msgs = await _history(client, lambda m: any(x["kind"] == "message" for x in m))
        assert [m["tx"] for m in msgs if m["kind"] == "user"] == ["only once"]
        assert await ever_published(redis) == 1
        # a resent /new (its response was lost) lands in the same new conversation
        new = {"text": "/new", "id": "new0123456789"}
        first = await client.post("/api/messages", json=new)
        client.cookies.clear()
        again = await client.post(
            "/api/messages", json=new, headers={"cookie": f"parley_web={before}"}
        )
        assert again.json()["result"] == "duplicate"
        assert again.json()["thread"] == first.json()["thread"]
        for bad in ("short", "has space in it", "x" * 41, 12345):
            r = await client.post("/api/messages", json={"text": "t", "id": bad})
            assert r.status_code == 400, bad


async def test_json_only_so_other_sites_cannot_post_forms(runtime: Any, redis: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        await client.get("/")
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            r = await client.post(
                "/api/messages", content=b'{"text": "hi"}', headers={"content-type": ctype}
            )
            assert r.status_code == 415, ctype
        r = await client.post("/api/login", content=b'{"token": "x"}')
        assert r.status_code == 415
    assert await ever_published(redis) == 0


async def test_a_refused_message_is_an_error_the_page_can_show(runtime: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:

        async def no_thanks(event: Any) -> str | None:
            return "rate window full"

        assert rt.ingest is not None
        rt.ingest.add_filter(no_thanks)
        await client.get("/")
        r = await client.post("/api/messages", json={"text": "hi"})
        assert r.status_code == 429
        assert "not accepted" in r.json()["error"]
        assert (await client.get("/api/history")).json()["messages"] == []


async def test_the_question_is_above_the_answer_however_fast_the_worker_is(
    runtime: Any,
) -> None:
    """The web process records the user's message before publishing it: a worker
    answering while the web process is still busy cannot land above it."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        assert rt.ingest is not None
        original = rt.ingest.submit

        async def slow_after_publish(event: Any) -> Any:
            result = await original(event)
            await asyncio.sleep(0.5)  # the worker answers meanwhile
            return result

        rt.ingest.submit = slow_after_publish  # type: ignore[method-assign]
        await client.get("/")
        r = await client.post("/api/messages", json={"text": "ping order"})
        assert r.status_code == 202
        msgs = await _history(client, lambda ms: len(ms) >= 2)
        assert msgs[0]["kind"] == "user" and msgs[0]["tx"] == "ping order", msgs


async def test_cookie_is_secure_behind_an_https_proxy_and_survives_login(runtime: Any) -> None:
    async with runtime("all", serve_web=True) as rt:
        rt.channels["web"].settings.web_chat_token = SecretStr("s3cret")
        async with _client(rt) as client:
            r = await client.get("/", headers={"x-forwarded-proto": "https"})
            cookie = r.headers["set-cookie"].lower()
            assert "secure" in cookie and "httponly" in cookie and "samesite=lax" in cookie
        async with _client(rt) as client:
            r = await client.get("/")
            assert "secure" not in r.headers["set-cookie"].lower()  # plain http on a laptop
            thread = (await client.get("/api/me")).json()["thread"]
            assert (await client.get("/api/events")).status_code == 401
            await client.post("/api/login", json={"token": "s3cret"})
            me = (await client.get("/api/me")).json()
            assert me == {"needs_token": False, "thread": thread}
            r = await client.post("/api/messages", json={"text": "/new"})
            assert r.status_code == 202
            me = (await client.get("/api/me")).json()
            assert me["needs_token"] is False and me["thread"] != thread  # still logged in


async def test_a_forged_or_foreign_cookie_gets_a_new_session(runtime: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        client.cookies.set("parley_web", '{"sid": "someone-else"}')
        r = await client.post("/api/messages", json={"text": "hi"})
        assert r.status_code == 400  # not signed by us: no session
        me = (await client.get("/api/me")).json()
        assert "someone-else" not in me["thread"]


async def test_close_streams_ends_live_event_streams_quickly(runtime: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        await client.get("/")
        lines: list[str] = []

        async def follow() -> None:
            async with client.stream("GET", "/api/events") as resp:
                async for line in resp.aiter_lines():
                    lines.append(line)

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.3)
        started = time.monotonic()
        rt.channels["web"].close_streams()
        await asyncio.wait_for(task, 5)
        assert time.monotonic() - started < 2.5
        assert "retry: 2000" in lines


@pytest.mark.parametrize(
    ("enabled", "token", "platforms", "hosted", "on", "why"),
    [
        (None, None, False, False, True, "no platform configured"),
        (None, None, True, False, False, "a platform channel is configured"),
        (None, None, False, True, False, "beyond this machine"),
        (True, None, True, True, True, "anyone who can reach it"),
        (True, "t", False, True, True, "WEB_CHAT_ENABLED=true"),
        (False, None, False, False, False, "WEB_CHAT_ENABLED=false"),
    ],
)
def test_when_the_web_chat_is_served(
    enabled: bool | None, token: str | None, platforms: bool, hosted: bool, on: bool, why: str
) -> None:
    settings = WebSettings(
        web_chat_enabled=enabled, web_chat_token=SecretStr(token) if token else None
    )
    got_on, got_why = status(settings, platforms, hosted=hosted)
    assert got_on is on
    assert why in got_why
