"""A new user with no key sees an approval in the web chat (demo model + demo_approval)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from agent_core.events import Action, EventKind, InboundEvent, ThreadKey
from agent_core.store import keys


async def _messages(redis: Any, thread: ThreadKey) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for _eid, f in await redis.xrange(keys.outbox_stream(thread)):
        if f.get(b"t") in (b"message", b"edit"):
            out[f[b"id"].decode()] = orjson.loads(f[b"m"])
    return out


async def _wait(pred: Any, timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await pred()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("not in time")


async def test_demo_model_asks_for_approval_in_the_web_chat(runtime: Any, redis: Any) -> None:
    async with runtime("all") as rt:
        t = ThreadKey("web", "local", "browser1")

        def ev(eid: str, text: str = "", token: str = "") -> InboundEvent:
            return InboundEvent(
                eid,
                EventKind.ACTION if token else EventKind.MESSAGE,
                "web",
                t,
                "sid1",
                "you",
                text,
                action=Action(token) if token else None,
            )

        await rt.ingest.submit(ev("m1", "please demo an approval"))

        async def prompt() -> Any:
            for m in (await _messages(redis, t)).values():
                if m.get("b"):
                    return m
            return None

        p = await _wait(prompt)
        assert [b[0] for b in p["b"]] == ["Approve", "Always", "Deny"]
        assert "demo_approval" in p["tx"]
        await rt.ingest.submit(ev("m2", token=p["b"][0][1]))

        async def done() -> Any:
            return any("demo action ran" in m["tx"] for m in (await _messages(redis, t)).values())

        await _wait(done)
        assert await redis.llen(keys.demo_notes(t)) == 1
        # the prompt lost its buttons and says who approved
        msgs = await _messages(redis, t)
        assert not any(m.get("b") for m in msgs.values())
        assert any("Approved by you" in m["tx"] for m in msgs.values())
