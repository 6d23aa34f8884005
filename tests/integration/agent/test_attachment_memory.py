"""Turns running together in one worker share its budget of attachment bytes
(ATTACHMENT_MEMORY_BYTES): a photo waits for another conversation's photo to be
prepared, then reaches the model all the same."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from collections.abc import Callable
from typing import Any

from PIL import Image

from agent_core.events import Attachment, ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, ModelInfo
from tests.integration.agent.conftest import FnModel, user_event


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (2, 2), "red").save(out, "PNG")
    return out.getvalue()


PNG = _png()


async def until(cond: Callable[[], bool]) -> None:
    """Wait until ``cond()`` holds (the timeout only guards against a hang)."""
    async with asyncio.timeout(10):
        while not cond():
            await asyncio.sleep(0.01)


async def test_two_conversations_photos_take_turns_within_the_budget(world: Any) -> None:
    def rule(req: CompletionRequest) -> Completion:
        return Completion(f"saw {len(req.messages[-1].images)} image(s)")

    model = FnModel(rule, ModelInfo("fn-model", supports_vision=True))
    w = world(model, attachment_memory_bytes=len(PNG))  # room for one photo at a time
    started: list[str] = []
    gates: dict[str, asyncio.Future[None]] = {}

    async def fetch_attachment(attachment: Attachment, max_bytes: int) -> bytes:
        started.append(attachment.ref)
        await gates.setdefault(attachment.ref, asyncio.get_running_loop().create_future())
        return PNG

    w.outbox.fetch_attachment = fetch_attachment  # this outbox can download files
    await w.start()
    agent = w.workers[0][0].agent
    threads = [ThreadKey("telegram", "bot1", f"mem{i}") for i in (1, 2)]
    for i, t in enumerate(threads):
        pic = Attachment("image", f"p{i}.png", "image/png", len(PNG), f"p{i}")
        await w.send(dataclasses.replace(user_event(t, "look"), attachments=(pic,)))

    # one photo downloads; the other conversation's waits in the worker's budget
    await until(lambda: len(started) == 1 and agent.downloads.queued == 1)
    assert agent.downloads.held == len(PNG)
    gates.setdefault(started[0], asyncio.get_running_loop().create_future()).set_result(None)
    await until(lambda: len(started) == 2)
    gates.setdefault(started[1], asyncio.get_running_loop().create_future()).set_result(None)
    for t in threads:
        await w.settle(t)
        assert w.texts(t) == ["saw 1 image(s)"]
    assert agent.downloads.held == 0 and agent.downloads.queued == 0


async def test_the_document_readers_settings_reach_the_reading_process(
    world: Any, monkeypatch: Any
) -> None:
    """DOCUMENT_READERS and DOCUMENT_MEMORY_MB go from the settings to every reading
    process a turn starts (a small host sets them lower than the defaults)."""
    from agent_core.agent import doc_process
    from tests.fakes.office import DOCX, PPTX, make_docx, make_pptx

    seen: list[tuple[str, object, object]] = []

    async def run(kind: str, data: bytes, args: dict[str, object], *a: Any, **kw: Any) -> Any:
        readers = kw["readers"]
        seen.append((kind, readers.memory_bytes, readers.slots))
        return {"error": "not read here"}

    monkeypatch.setattr(doc_process, "run", run)
    files = {"d": make_docx(["hello"]), "p": make_pptx([{"title": "Hi"}])}

    async def fetch_attachment(attachment: Attachment, max_bytes: int) -> bytes:
        return files[attachment.ref]

    w = world(FnModel(lambda req: Completion("ok")), document_readers=1, document_memory_mb=256)
    w.outbox.fetch_attachment = fetch_attachment
    await w.start()
    t = ThreadKey("telegram", "bot1", "docs")
    atts = (
        Attachment("document", "a.docx", DOCX, 0, "d"),
        Attachment("document", "b.pptx", PPTX, 0, "p"),
    )
    await w.send(dataclasses.replace(user_event(t, "read these"), attachments=atts))
    await w.settle(t)
    assert sorted(seen) == [("docx", 256 << 20, 1), ("pptx", 256 << 20, 1)]
