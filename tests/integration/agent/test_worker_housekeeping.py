"""What a worker leaves behind: a failed turn's sent records go with its message; a
dead worker's conversation is resumed however many others are active; stopped
workers leave the consumer group."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, TextDelta
from agent_core.store import keys
from agent_core.store.delivery import Delivery
from tests.integration.agent.conftest import FnModel, user_event


class PreviewThenBug(FnModel):
    """Streams a preview of its answer, then hits a bug (not an LLM error)."""

    async def stream(self, request: Any) -> Any:
        self.requests.append(request)
        if "boom" in request.messages[-1].content:
            yield TextDelta("Let me think about that for a moment, here is a first part " * 3)
            await asyncio.sleep(1.5)  # long enough for the preview to go out
            raise KeyError("a bug")
        yield Completion("echo: " + request.messages[-1].content)


async def test_a_failed_turns_sent_records_go_with_its_message(world: Any) -> None:
    T = ThreadKey("web", "local", "failed-records")
    w = world(PreviewThenBug(lambda r: Completion("x")))
    w.outbox.stream_interval = 0.1  # a channel that streams previews
    await w.start()
    await w.send(user_event(T, "boom", eid="e-boom"))
    await w.settle(T)
    assert "Something went wrong" in w.texts(T)[-1]  # the failure path ran
    assert await w.redis.hgetall(keys.sent(T)) == {}  # the hash had no TTL: kept for good
    await w.send(user_event(T, "and now?", eid="e-next"))
    await w.settle(T)
    assert w.texts(T)[-1] == "echo: and now?"


async def test_a_dead_workers_thread_is_resumed_however_many_threads_are_active(
    world: Any,
) -> None:
    # the sweeper looked at the 200 oldest threads of the index only
    w = world(FnModel(lambda r: Completion("echo: " + r.messages[-1].content)))
    live = Delivery(w.redis, w.clients.blocking, lock_ttl_ms=600_000)  # live workers' turns
    busy = [
        (b"", user_event(ThreadKey("web", "local", f"busy{i}"), "long one")) for i in range(250)
    ]
    await live.handoff_and_begin(busy, "live-worker")
    await asyncio.sleep(0.01)
    dead = Delivery(w.redis, w.clients.blocking, lock_ttl_ms=200)  # then SIGKILLed
    orphan = ThreadKey("web", "local", "orphan")
    await dead.handoff_and_begin([(b"", user_event(orphan, "hello"))], "dead-worker")
    await w.start()
    for _ in range(200):  # its lock expires after 0.2 s; the sweeper runs every 0.1 s
        if w.texts(orphan):
            break
        await asyncio.sleep(0.05)
    assert w.texts(orphan) == ["echo: hello"]
    assert all(not w.texts(ThreadKey("web", "local", f"busy{i}")) for i in range(250))


async def test_stopped_workers_leave_the_consumer_group(world: Any) -> None:
    w = world(FnModel(lambda r: Completion("ok")))
    for _ in range(5):  # five restarts of one worker, each stopped cleanly
        await w.start()
        await asyncio.sleep(0.3)
        await w.stop()
    assert await w.redis.xinfo_consumers(keys.INBOX_STREAM, keys.INBOX_GROUP) == []
