"""An answer the model stopped in the middle of (an LLM error after some text was
streamed) ends as a final message marked cut off, not "still streaming"."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.integration.web.webtools import wait_up


async def _until_the_notice(rt: Any, text: str) -> list[Any]:
    """Send ``text`` in the web chat; its history once the error notice arrived."""
    await wait_up(rt.port)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rt.port}", timeout=10) as c:
        await c.get("/")
        await c.post("/api/messages", json={"text": text})
        deadline = time.monotonic() + 15
        msgs: list[Any] = []
        while time.monotonic() < deadline:
            msgs = (await c.get("/api/history")).json()["messages"]
            if any(m.get("n") for m in msgs):  # the error notice arrived
                break
            await asyncio.sleep(0.05)
    return msgs


async def test_an_answer_cut_off_by_a_model_error_stops_streaming(runtime: Any) -> None:
    from agent_core.llm import errors as llm_errors
    from agent_core.llm.base import TextDelta
    from agent_core.llm.demo import DemoProvider

    class DiesMidStream(DemoProvider):
        async def stream(self, request: Any) -> AsyncIterator[Any]:
            n = 0
            async for item in super().stream(request):
                yield item
                n += isinstance(item, TextDelta)
                if n >= 8:
                    raise llm_errors.Timeout("read timed out")

    async with runtime("all", serve_web=True, llm=DiesMidStream(delay=0.05)) as rt:
        msgs = await _until_the_notice(rt, "tell me something long")
    partial = [m for m in msgs if m["kind"] == "message" and not m.get("n")]
    assert partial, msgs
    assert all(m.get("f", True) is not False for m in partial), partial
    assert any("cut off" in m.get("tx", "") for m in partial), partial


async def test_a_cut_off_marker_goes_after_the_code_block_it_was_cut_in(runtime: Any) -> None:
    from agent_core.llm import errors as llm_errors
    from agent_core.llm.base import TextDelta
    from agent_core.llm.demo import DemoProvider

    class DiesInCode(DemoProvider):
        async def stream(self, request: Any) -> AsyncIterator[Any]:
            for piece in ("Here is the script:\n\n```python\n", "import os\n", "print(os"):
                await asyncio.sleep(0.3)  # each piece is seen as a preview edit
                yield TextDelta(piece)
            raise llm_errors.Timeout("read timed out")

    async with runtime("all", serve_web=True, llm=DiesInCode()) as rt:
        msgs = await _until_the_notice(rt, "write me a script")
    [cut] = [m["tx"] for m in msgs if m["kind"] == "message" and not m.get("n")]
    assert cut == "Here is the script:\n\n```python\nimport os\nprint(os\n```\n\n_(cut off)_"
