"""Photos posted in Discord reach a vision model (DiscordOutbox.fetch_attachment)."""

from __future__ import annotations

import base64

import pytest
from redis.asyncio import Redis

from agent_core.errors import SendFailed
from agent_core.events import Attachment
from agent_core.llm.base import CompletionRequest, ModelInfo
from agent_core.llm.demo import DemoProvider
from agent_core.store.embedded import EmbeddedValkey
from channels.discord.parse import attachment_kind
from channels.discord.sender import DiscordOutbox
from tests.fakes.discord import CHANNEL_ID, DM_CHANNEL_ID, FakeDiscord
from tests.fakes.office import DOCX, PPTX, XLSX, make_docx, make_pptx, make_xlsx
from tests.fakes.pdf import encrypted, make_pdf
from tests.integration.approvals_e2e.approvals_harness import (
    process,
    wait_until,
)
from tests.integration.discord.runtime_stack import discord_settings

PNG = base64.b64decode(  # a real 1x1 PNG: the agent reads the format from the bytes
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
HEIC = b"\0\0\0\x18ftypheic" + bytes(32)


def attachment(a: dict[str, object]) -> Attachment:
    mime = str(a["content_type"])
    return Attachment(
        attachment_kind(mime), str(a["filename"]), mime, int(a["size"]), str(a["url"])
    )  # type: ignore[call-overload]


async def test_a_posted_file_is_fetched_from_the_cdn(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    a = fake_discord.add_file(CHANNEL_ID, "cat.png", PNG)
    assert await outbox.fetch_attachment(attachment(a), len(PNG)) == PNG


async def test_refusals_ask_nothing_or_say_why(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    big = attachment(fake_discord.add_file(CHANNEL_ID, "big.png", PNG * 100))
    with pytest.raises(SendFailed, match="larger than"):
        await outbox.fetch_attachment(big, len(PNG) * 100 - 1)
    elsewhere = Attachment("image", "x.png", "image/png", 10, "http://127.0.0.2:9/x.png")
    with pytest.raises(SendFailed, match="file host"):
        await outbox.fetch_attachment(elsewhere, 1000)
    assert fake_discord.file_gets == []  # neither was downloaded
    old = attachment(fake_discord.add_file(CHANNEL_ID, "old.png", PNG, expires_in=-1))
    with pytest.raises(SendFailed, match="HTTP 404"):  # a signed URL a day old
        await outbox.fetch_attachment(old, 10_000)


class VisionDemo(DemoProvider):
    """The demo model, seeing images, remembering what it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[CompletionRequest] = []

    def model_info(self, model: str | None = None) -> ModelInfo:
        return ModelInfo(name="demo-vision", context_window=128_000, supports_vision=True)

    async def complete(self, request: CompletionRequest):  # type: ignore[no-untyped-def]
        self.requests.append(request)
        return await super().complete(request)

    async def stream(self, request: CompletionRequest):  # type: ignore[no-untyped-def]
        self.requests.append(request)
        async for item in super().stream(request):
            yield item


async def test_photos_in_a_dm_reach_the_model_end_to_end(
    valkey: EmbeddedValkey, redis: Redis, fake_discord: FakeDiscord
) -> None:
    """Gateway and worker processes: a PNG is shown to the model with its type read
    from the bytes; a HEIC (which the model APIs refuse) is named with the reason."""
    settings = discord_settings(valkey, fake_discord)
    model = VisionDemo()
    files = [
        fake_discord.add_file(DM_CHANNEL_ID, "cat.png", PNG, "image/png"),
        fake_discord.add_file(DM_CHANNEL_ID, "IMG_0001.heic", HEIC, "image/heic"),
    ]
    async with process(settings, "gateway"), process(settings, "worker", llm=model):
        await fake_discord.wait_ready()
        await fake_discord.user_message(DM_CHANNEL_ID, "what is this?", attachments=files)
        await wait_until(lambda: model.requests, what="the model call", timeout=15)
    (msg,) = [m for m in model.requests[0].messages if m.role == "user"]
    assert [i.mime for i in msg.images] == ["image/png"]
    assert "IMG_0001.heic: not a JPEG, PNG, GIF or WebP image" in msg.content
    assert "what is this?" in msg.content


async def test_text_files_pdfs_and_office_files_are_read_to_any_model(
    valkey: EmbeddedValkey, redis: Redis, fake_discord: FakeDiscord
) -> None:
    """A posted .py file, a PDF, a Word, an Excel and a PowerPoint file join the
    message as text (the PDF with its page markers, the workbook with its sheet
    markers, the deck with its slides); a PDF with a password and a broken workbook
    are named with the reason; a legacy .ppt stays a description."""
    settings = discord_settings(valkey, fake_discord)
    model = VisionDemo()
    code = "def add(a, b):\n    return a - b\n"
    spec = make_pdf(["Section 1: add returns the sum", "Section 2: no rounding"])
    deck = make_pptx([{"title": "Plan", "body": ["fix add"], "notes": "say why"}])
    memo = make_docx(["add must not subtract", [["case", "want"], ["1+1", "2"]]])
    cases = make_xlsx({"Cases": [["a", "b", "sum"], [1, 1, 2]]})
    files = [
        fake_discord.add_file(DM_CHANNEL_ID, "calc.py", code.encode(), "text/x-python"),
        fake_discord.add_file(DM_CHANNEL_ID, "spec.pdf", spec, "application/pdf"),
        fake_discord.add_file(
            DM_CHANNEL_ID, "locked.pdf", encrypted(spec, "pw"), "application/pdf"
        ),
        fake_discord.add_file(DM_CHANNEL_ID, "memo.docx", memo, DOCX),
        fake_discord.add_file(DM_CHANNEL_ID, "cases.xlsx", cases, XLSX),
        fake_discord.add_file(DM_CHANNEL_ID, "sheet.xlsx", b"PK\x03\x04 ...", XLSX),
        fake_discord.add_file(DM_CHANNEL_ID, "deck.pptx", deck, PPTX),
        fake_discord.add_file(
            DM_CHANNEL_ID, "old.ppt", b"\xd0\xcf\x11\xe0 ...", "application/vnd.ms-powerpoint"
        ),
    ]
    async with process(settings, "gateway"), process(settings, "worker", llm=model):
        await fake_discord.wait_ready()
        await fake_discord.user_message(DM_CHANNEL_ID, "what is wrong here?", attachments=files)
        await wait_until(lambda: model.requests, what="the model call", timeout=15)
    (msg,) = [m for m in model.requests[0].messages if m.role == "user"]
    assert f"--- calc.py ---\n{code}\n--- end of calc.py ---" in msg.content
    assert (
        "--- spec.pdf (PDF, 2 pages) ---\n"
        "--- page 1 ---\nSection 1: add returns the sum\n"
        "--- page 2 ---\nSection 2: no rounding\n"
        "--- end of spec.pdf ---"
    ) in msg.content
    assert (
        "--- memo.docx (Word document) ---\n"
        "add must not subtract\n| case | want |\n| 1+1 | 2 |\n"
        "--- end of memo.docx ---"
    ) in msg.content
    assert (
        "--- cases.xlsx (Excel workbook, 1 sheet) ---\n"
        "--- sheet Cases ---\n1: a | b | sum\n2: 1 | 1 | 2\n"
        "--- end of cases.xlsx ---"
    ) in msg.content
    assert (
        "[not read: locked.pdf: password-protected; sheet.xlsx: not an Excel workbook (.xlsx)]"
    ) in msg.content
    assert (
        "--- deck.pptx (PowerPoint presentation, 1 slide) ---\n"
        "--- slide 1 ---\n# Plan\nfix add\nNotes: say why\n"
        "--- end of deck.pptx ---"
    ) in msg.content
    assert "old.ppt" in msg.content and "\xd0" not in msg.content  # described, not read
    assert "%PDF" not in msg.content and msg.images == ()
