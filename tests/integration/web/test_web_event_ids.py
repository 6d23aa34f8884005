"""The event stream refuses an id Redis would refuse (400), and takes the ones it
would take."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx

from tests.integration.web.webtools import client_for


async def _first_event_status(
    client: httpx.AsyncClient, secs: float, **params: str
) -> tuple[int, list[str]]:
    status = 0
    lines: list[str] = []

    async def follow() -> None:
        nonlocal status
        async with client.stream("GET", "/api/events", params=params) as resp:
            status = resp.status_code
            async for line in resp.aiter_lines():
                lines.append(line)

    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(follow(), secs)
    return status, lines


async def test_a_malformed_after_id_is_a_400_not_a_silent_stream(runtime: Any) -> None:
    """`after` ids Redis refuses (a trailing '-', more than 64 bits) pass the check in
    channel.py and give a 200 event stream that never delivers anything."""
    async with runtime("all", serve_web=True) as rt, client_for(rt) as client:
        await client.get("/")
        thread = (await client.get("/api/me")).json()["thread"]
        assert (await client.post("/api/messages", json={"text": "hi"})).status_code == 202
        for bad in ("99999999999999999999-0", "1-", "-1", "1-2-3", "²-0"):
            status, lines = await _first_event_status(client, 2.0, thread=thread, after=bad)
            assert status == 400, (bad, status, lines)
        for good in ("0-0", "5", "18446744073709551615-0"):
            status, lines = await _first_event_status(client, 0.5, thread=thread, after=good)
            assert status == 200, (good, status, lines)


async def test_a_retry_refused_with_503_keeps_the_question_it_repeats(runtime: Any) -> None:
    """The first POST was taken (its response lost); the same-id retry hits a store
    blip (503).  The question is queued and answered: the retry must not take it
    back out of the transcript."""
    from agent_core.errors import StoreUnavailable

    async with runtime("all", serve_web=True) as rt, client_for(rt) as client:
        await client.get("/")
        thread = (await client.get("/api/me")).json()["thread"]
        body = {"text": "what time is it?", "id": "resend0001", "thread": thread}
        assert (await client.post("/api/messages", json=body)).status_code == 202
        real = rt.ingest.submit

        async def hiccup(event: Any) -> Any:
            raise StoreUnavailable("blip")

        rt.ingest.submit = hiccup
        try:
            assert (await client.post("/api/messages", json=body)).status_code == 503
        finally:
            rt.ingest.submit = real
        for _ in range(200):
            msgs = (await client.get("/api/history", params={"thread": thread})).json()
            if any(m["kind"] == "message" for m in msgs["messages"]):
                break
            await asyncio.sleep(0.05)
        shown = [(m["kind"], m.get("tx", "")) for m in msgs["messages"]]
        assert ("user", "what time is it?") in shown, shown
        assert sum(1 for k, _ in shown if k == "message") == 1, shown
