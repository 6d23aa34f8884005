"""Per-thread order when a worker dies between reading a stream entry and handing it off.

A worker reads entry A of thread T (XREADGROUP), then dies before its hand-off
script moved A into T's mailbox.  A later entry B of the same thread is read by
a live worker, handed off and answered at once; A only comes back through
XAUTOCLAIM after RECLAIM_IDLE_SECS and is answered after B.  Invariant 2 of
DESIGN.md ("in arrival order") says A must be answered first.

Deterministic: the "dead worker" is a consumer that reads A and never acks it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.store import keys
from channels.web.outbox import fold_transcript
from tests.fakes.llm_servers import FakeLLMServer
from tests.faults.harness import echo_all_since_last_answer


async def test_entry_of_a_dead_reader_is_answered_before_later_messages(
    runtime: Any, redis: Any
) -> None:
    async with FakeLLMServer() as llm:
        llm.responder = echo_all_since_last_answer
        settings = {
            "llm_backend": "openai_compatible",
            "llm_base_url": llm.openai_url,
            "llm_model": "fake",
            "llm_max_retries": 0,
        }
        thread = ThreadKey("web", "local", "ordertest", "")

        def event(n: int) -> InboundEvent:
            return InboundEvent(
                event_id=f"order-{n}",
                kind=EventKind.MESSAGE,
                channel="web",
                thread=thread,
                user_id="u1",
                user_name="you",
                text=f"m1-{n}",
            )

        async with runtime("worker", llm_settings=settings, reclaim_idle_secs=1.0) as rt:
            # a "worker" reads the first message and dies before handing it off
            await rt.ingest.submit(event(0))
            got = await redis.xreadgroup(
                keys.INBOX_GROUP, "ghost-worker", {keys.INBOX_STREAM: ">"}, count=1
            )
            assert got and len(got[0][1]) == 1
            # the same user's next message arrives and is read by the live worker
            await rt.ingest.submit(event(1))
            deadline = time.monotonic() + 15
            order: list[str] = []
            while time.monotonic() < deadline:
                entries = await redis.xrange(keys.outbox_stream(thread))
                order = [
                    str(m.get("tx"))
                    for m in fold_transcript(entries)
                    if m.get("kind") == "message" and "m1-" in str(m.get("tx"))
                ]
                covered = " ".join(order)
                if "m1-0" in covered and "m1-1" in covered:
                    break
                await asyncio.sleep(0.1)
    assert order and "m1-0" in order[0], f"answered out of arrival order: {order}"
