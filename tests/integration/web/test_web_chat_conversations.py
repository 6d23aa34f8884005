"""Which conversation a tab follows, and what its history holds."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx
import orjson
from redis.asyncio import Redis

from agent_core.events import EventKind, InboundEvent, OutboundMessage, ThreadKey
from agent_core.store import keys
from channels.web.outbox import (
    LIVE_TTL_SECS,
    TRANSCRIPT_MAX_MESSAGES,
    TRANSCRIPT_TTL_SECS,
    LocalOutbox,
    transcript_keys,
)
from tests.integration.conftest import free_port
from tests.integration.inbox import ever_published
from tests.integration.web.webtools import client_for as _client


async def _history(
    client: httpx.AsyncClient, pred: Any, timeout: float = 10.0, **params: str
) -> list[Any]:
    deadline = time.monotonic() + timeout
    msgs: list[Any] = []
    while time.monotonic() < deadline:
        msgs = (await client.get("/api/history", params=params)).json()["messages"]
        if pred(msgs):
            return msgs
        await asyncio.sleep(0.05)
    raise AssertionError(f"history never matched: {msgs}")


async def _events(
    client: httpx.AsyncClient, secs: float, headers: dict[str, str], **params: str
) -> tuple[int, list[Any]]:
    got: list[Any] = []
    status = 0

    async def follow() -> None:
        nonlocal status
        async with client.stream("GET", "/api/events", headers=headers, params=params) as resp:
            status = resp.status_code
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    got.append(orjson.loads(line[6:]))

    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(follow(), secs)
    return status, got


def _texts(events: list[Any]) -> list[str]:
    return [e["m"].get("tx", "") for e in events if isinstance(e.get("m"), dict)]


async def _two_conversations(client: httpx.AsyncClient) -> tuple[str, str, str]:
    """A (with one answered message), then B started by "another tab": (A, B, last id in A)."""
    await client.get("/")
    thread_a = (await client.get("/api/me")).json()["thread"]
    await client.post("/api/messages", json={"text": "conversation A"})
    await _history(client, lambda m: any(x["kind"] == "message" for x in m))
    last_in_a = (await client.get("/api/history")).json()["last"]
    r = await client.post("/api/messages", json={"text": "/new"})
    assert r.status_code == 202
    await _history(client, lambda m: any("Started a new" in x.get("tx", "") for x in m))
    return thread_a, r.json()["thread"], last_in_a


# ------------------------------------------------------------------ tabs
async def test_a_resumed_event_stream_never_continues_with_another_conversation(
    runtime: Any,
) -> None:
    """Two tabs share the cookie; tab 2 starts a new conversation.  Tab 1's event
    stream reconnects with Last-Event-ID from A: without saying which conversation
    that id belongs to it gets 409 (the page reloads), never B's entries after it."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        _a, _b, last_in_a = await _two_conversations(client)
        status, got = await _events(client, 2.0, {"last-event-id": last_in_a})
        assert status == 409
        texts = _texts(got)
        assert not any(t == "/new" or "Started a new conversation" in t for t in texts), texts


async def test_a_tab_keeps_following_and_writing_to_the_conversation_it_shows(
    runtime: Any,
) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        thread_a, thread_b, last_in_a = await _two_conversations(client)
        follower = asyncio.create_task(
            _events(client, 3.0, {"last-event-id": last_in_a}, thread=thread_a, after="0-0")
        )
        await asyncio.sleep(0.5)
        r = await client.post("/api/messages", json={"text": "still in A", "thread": thread_a})
        assert r.status_code == 202 and r.json()["thread"] == thread_a
        status, got = await follower
        assert status == 200
        texts = _texts(got)
        assert "still in A" in texts and "You said: still in A" in " ".join(texts), texts
        assert not any("Started a new conversation" in t for t in texts), texts
        # A's history has it, B's does not; the cookie still names B
        msgs = await _history(client, lambda m: len(m) >= 4, thread=thread_a)
        assert [m["tx"] for m in msgs if m["kind"] == "user"] == ["conversation A", "still in A"]
        assert (await client.get("/api/me")).json()["thread"] == thread_b
        b = (await client.get("/api/history")).json()
        assert b["thread"] == thread_b
        assert not any("still in A" in m["tx"] for m in b["messages"])


async def test_an_approval_pressed_in_a_tab_whose_conversation_was_replaced_is_not_lost(
    runtime: Any,
) -> None:
    """Tab 1 shows an approval prompt; tab 2 starts a new conversation.  Tab 1's press
    names its conversation and is decided there; a press that names none is refused
    (409: the page reloads) instead of going to the cookie's newer conversation."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        await client.get("/")
        thread_a = (await client.get("/api/me")).json()["thread"]
        await client.post("/api/messages", json={"text": "demo an approval"})
        msgs = await _history(client, lambda m: any(x.get("b") for x in m))
        payload = next(x["b"][0][1] for x in msgs if x.get("b"))  # Approve
        await client.post("/api/messages", json={"text": "/new"})  # tab 2
        await _history(client, lambda m: any("Started a new" in x.get("tx", "") for x in m))
        r = await client.post("/api/actions", json={"token": payload})  # an out-of-date page
        assert r.status_code == 409
        r = await client.post("/api/actions", json={"token": payload, "thread": thread_a})
        assert r.status_code == 202 and r.json()["thread"] == thread_a
        await _history(
            client, lambda m: any("demo action ran" in x["tx"] for x in m), thread=thread_a
        )


async def test_a_conversation_that_is_not_this_browsers_is_409(runtime: Any, redis: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as mine, _client(rt) as theirs:
        await mine.get("/")
        await theirs.get("/")
        their_thread = (await theirs.get("/api/me")).json()["thread"]
        my_thread = (await mine.get("/api/me")).json()["thread"]
        for bad in (their_thread, "web:local:nosuchsession1:", "telegram:1:2:", "junk"):
            r = await mine.post("/api/messages", json={"text": "hi", "thread": bad})
            assert r.status_code == 409, bad
            assert r.json()["thread"] == my_thread  # what the page shows instead
            r = await mine.get("/api/history", params={"thread": bad})
            assert r.status_code == 409, bad
            status, _ = await _events(mine, 1.0, {}, thread=bad)
            assert status == 409, bad
            r = await mine.post("/api/actions", json={"token": "x", "thread": bad})
            assert r.status_code == 409, bad
        r = await mine.post("/api/messages", json={"text": "hi", "thread": 5})
        assert r.status_code == 400
    assert await ever_published(redis) == 0


# ------------------------------------------------------------------ history
async def _long_turns(out: LocalOutbox, thread: ThreadKey, turns: int) -> None:
    for turn in range(turns):
        ev = InboundEvent(
            event_id=f"e{turn}",
            kind=EventKind.MESSAGE,
            channel="web",
            thread=thread,
            user_id="u",
            user_name="you",
            text=f"question {turn}",
        )
        await out.record_user(thread, ev)
        ref = await out.send(thread, OutboundMessage("a", final=False))
        text = "a"
        for i in range(175):  # 35 s of streaming at the page's 0.2 s interval
            text += " word"
            if i % 20 == 0:
                await out.typing(thread)
            await out.edit(ref, OutboundMessage(text, final=False))
        await out.edit(ref, OutboundMessage(f"answer {turn}: {text}"))
        await out.turn_finished(thread, ev)


async def test_history_keeps_the_start_of_a_dozen_streamed_answers(runtime: Any) -> None:
    """Streamed edits, typing pings and end-of-turn markers fill the live stream, not
    the transcript: twelve 35-second answers keep the first question in /api/history,
    each message once, in order, in its final form."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        await client.get("/")
        thread = ThreadKey.parse((await client.get("/api/me")).json()["thread"])
        await _long_turns(LocalOutbox(rt.channels["web"].redis, "web"), thread, 12)
        msgs = (await client.get("/api/history")).json()["messages"]
        assert [m["tx"].split(":")[0] for m in msgs] == [
            x for t in range(12) for x in (f"question {t}", f"answer {t}")
        ]
        assert all(m.get("f", True) for m in msgs)
        assert len({m["id"] for m in msgs}) == len(msgs)
        redis = rt.channels["web"].redis
        ttl = await redis.ttl(keys.outbox_stream(thread))
        assert 0 < ttl <= LIVE_TTL_SECS  # the live stream is short-lived


async def test_history_is_capped_by_message_count_and_a_resent_part_is_one_message(
    redis: Redis,
) -> None:
    out = LocalOutbox(redis, "web")
    thread = ThreadKey("web", "local", "captest12345", "")
    for i in range(TRANSCRIPT_MAX_MESSAGES + 5):
        await out.send(thread, OutboundMessage(f"m{i}"))
    ev = InboundEvent(
        event_id="u1", kind=EventKind.MESSAGE, channel="web", thread=thread,
        user_id="u", user_name="you", text="mine",
    )  # fmt: skip
    await out.record_user(thread, ev)
    await out.record_user(thread, ev)  # the same message recorded twice: once
    await out.retract_user(thread, "u1")
    await out.record_user(thread, ev)
    from channels.web.outbox import read_transcript

    msgs, last = await read_transcript(redis, thread)
    assert len(msgs) == TRANSCRIPT_MAX_MESSAGES
    assert msgs[0]["tx"] == "m6" and msgs[-2]["tx"] == f"m{TRANSCRIPT_MAX_MESSAGES + 4}"
    assert msgs[-1] == {**msgs[-1], "kind": "user", "tx": "mine"}
    assert last == (await redis.xrevrange(keys.outbox_stream(thread), count=1))[0][0].decode()


async def test_a_transcript_expires_after_it_is_left_and_a_read_keeps_it(
    runtime: Any, redis: Redis
) -> None:
    """The conversation /new leaves behind is not kept for ever: its transcript keys
    expire (refreshed by every message and by every history read)."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        old, _new, _ = await _two_conversations(client)
        order, msgs = transcript_keys(ThreadKey.parse(old))
        for key in (order, msgs):
            assert 0 < await redis.ttl(key) <= TRANSCRIPT_TTL_SECS
            await redis.expire(key, 60)
        await client.get("/api/history", params={"thread": old})
        for key in (order, msgs):
            assert await redis.ttl(key) > 60


async def test_a_streamed_answer_keeps_one_copy_in_the_live_stream(runtime: Any) -> None:
    """Each streamed edit carries the whole text, so it replaces the previous edit in
    the live stream: 300 edits of a 24k answer stay small, and a page resuming after
    an edit that is gone gets the latest text, without a false "reload"."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        await client.get("/")
        me = (await client.get("/api/me")).json()
        thread = ThreadKey.parse(me["thread"])
        redis = rt.channels["web"].redis
        out = LocalOutbox(redis, "web")
        stream = keys.outbox_stream(thread)
        text = "x" * 80
        ref = await out.send(thread, OutboundMessage(text, final=False))
        await out.edit(ref, OutboundMessage(text + "y", final=False))
        seen = (await redis.xrevrange(stream, count=1))[0][0].decode()  # that first edit
        for _ in range(300):
            text += "x" * 80
            await out.edit(ref, OutboundMessage(text, final=False))
        assert await redis.xlen(stream) == 2  # the message and its latest edit
        assert await redis.memory_usage(stream, samples=0) < 100_000
        _, got = await _events(client, 1.5, {}, thread=me["thread"], after=seen)
        assert {"t": "reload"} not in got
        assert _texts(got) == [text]
        msgs = (await client.get("/api/history")).json()["messages"]
        assert [m["tx"] for m in msgs] == [text]
        # The stream's first entry is never deleted (the gap check compares with it).
        await redis.xtrim(stream, maxlen=1, approximate=False)
        first = (await redis.xrange(stream, count=1))[0][0].decode()
        await out.edit(ref, OutboundMessage(text + "!", final=False))
        assert (await redis.xrange(stream, count=1))[0][0].decode() == first
        _, got = await _events(client, 1.5, {}, thread=me["thread"], after=first)
        assert {"t": "reload"} not in got and _texts(got) == [text + "!"]


async def test_a_conversation_kept_only_in_the_stream_is_carried_into_the_transcript(
    redis: Redis,
) -> None:
    """Transcripts written before the message store existed live in the out stream:
    the first new message copies them, so the history still starts at the start."""
    thread = ThreadKey("web", "local", "legacythread1", "")
    stream = keys.outbox_stream(thread)
    await redis.xadd(stream, {"t": "user", "id": "old1", "m": b'{"tx":"old question"}'})
    await redis.xadd(stream, {"t": "message", "id": "old2", "m": b'{"tx":"old","f":false}'})
    await redis.xadd(stream, {"t": "edit", "id": "old2", "m": b'{"tx":"old answer"}'})
    await redis.xadd(stream, {"t": "typing", "id": ""})
    from channels.web.outbox import read_transcript

    before, _ = await read_transcript(redis, thread)
    assert [m["tx"] for m in before] == ["old question", "old answer"]
    await LocalOutbox(redis, "web").send(thread, OutboundMessage("new answer"))
    after, _ = await read_transcript(redis, thread)
    assert [m["tx"] for m in after] == ["old question", "old answer", "new answer"]


async def test_an_event_stream_that_lost_entries_tells_the_page_to_reload(runtime: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        await client.get("/")
        me = (await client.get("/api/me")).json()
        thread = ThreadKey.parse(me["thread"])
        out = LocalOutbox(rt.channels["web"].redis, "web")
        await out.send(thread, OutboundMessage("one"))
        seen = (await client.get("/api/history")).json()["last"]
        await out.send(thread, OutboundMessage("two"))  # trimmed away before the page saw it
        await out.send(thread, OutboundMessage("three"))
        stream = keys.outbox_stream(thread)
        await rt.channels["web"].redis.xtrim(stream, maxlen=1, approximate=False)
        _, got = await _events(client, 1.5, {}, thread=me["thread"], after=seen)
        assert got and got[0] == {"t": "reload"}
        _, got = await _events(client, 1.5, {}, thread=me["thread"], after="0-0")
        assert {"t": "reload"} not in got


# ------------------------------------------------------------------ Redis down
async def test_history_when_redis_is_down_is_a_json_503(runtime: Any) -> None:
    """/api/history (what the page loads first) answers a Redis outage with a JSON 503
    the page retries on, like /api/messages does."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        await client.get("/")
        ch = rt.channels["web"]
        real = ch.redis
        dead = Redis.from_url(f"redis://127.0.0.1:{free_port()}", socket_connect_timeout=0.5)
        ch.redis = dead
        try:
            r = await client.get("/api/history")
        finally:
            ch.redis = real
            await dead.aclose()
        assert r.status_code == 503, (r.status_code, r.text)
        assert "storage" in r.json()["error"]
        assert (await client.get("/api/history")).status_code == 200


# ------------------------------------------------ several web processes
async def _events_until(
    client: httpx.AsyncClient, until: str, secs: float, headers=None, **params: str
):
    """(id, payload) pairs of the event stream until an entry with t == until."""
    got: list[tuple[str, dict[str, Any]]] = []

    async def follow() -> None:
        async with client.stream("GET", "/api/events", params=params, headers=headers or {}) as r:
            assert r.status_code == 200, r.status_code
            eid = ""
            async for line in r.aiter_lines():
                if line.startswith("id: "):
                    eid = line[4:]
                elif line.startswith("data: "):
                    ev = orjson.loads(line[6:])
                    got.append((eid, ev))
                    eid = ""
                    if ev.get("t") == until:
                        return

    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(follow(), secs)
    return got


async def test_post_on_a_answer_followed_on_b_and_resumed_on_b(runtime: Any) -> None:
    """One browser, two web processes (the router picks either): a message posted to
    A is followed on B's event stream, and a reconnect to A resumes without a gap."""
    async with (
        runtime("worker") as _w,
        runtime("web", serve_web=True) as a,
        runtime("web", serve_web=True) as b,
        _client(a) as ca,
        _client(b) as cb,
    ):
        await ca.get("/")
        cb.cookies = ca.cookies  # one browser, two web processes
        thread = (await cb.get("/api/me")).json()["thread"]
        h = (await cb.get("/api/history", params={"thread": thread})).json()
        r = await ca.post(
            "/api/messages", json={"text": "hello", "id": "abcdefgh01", "thread": thread}
        )
        assert r.status_code == 202, r.text
        got = await _events_until(cb, "done", 20, thread=thread, after=h["last"])
        kinds = [ev["t"] for _, ev in got]
        assert "user" in kinds and "done" in kinds, kinds
        # resume on A from the first entry B delivered: the rest again, no gap
        first_id = got[0][0]
        again = await _events_until(
            ca, "done", 5, headers={"Last-Event-ID": first_id}, thread=thread
        )
        assert [e for e, _ in again if e] == [e for e, _ in got[1:] if e]
