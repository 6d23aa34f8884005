"""Text files read to the model (agent_core/agent/documents.py)."""

from __future__ import annotations

import asyncio

import pytest

from agent_core.agent import documents, images
from agent_core.agent.documents import MAX_TEXT_TOKENS, Room, is_text, read_texts
from agent_core.agent.download_budget import DownloadBudget
from agent_core.errors import SendFailed
from agent_core.events import Attachment


@pytest.mark.parametrize(
    ("name", "mime", "text"),
    [
        ("notes.txt", "text/plain", True),
        ("a.csv", "text/csv; charset=utf-8", True),
        ("data.json", "application/json", True),
        ("main.py", "", True),  # no type: the extension decides
        ("main.py", "application/octet-stream", True),
        ("Dockerfile", "", True),
        ("report.pdf", "application/pdf", False),
        ("sheet.xlsx", "application/vnd.ms-excel", False),
        ("evil.py", "application/pdf", False),  # a type that says otherwise wins
        ("blob.bin", "", False),
        ("song.mp3", "audio/mpeg", False),
    ],
)
def test_what_counts_as_text(name: str, mime: str, text: bool) -> None:
    assert is_text(Attachment("document", name, mime, 10, "r")) is text


class Files:
    def __init__(self, files: dict[str, bytes], slow: frozenset[str] = frozenset()) -> None:
        self.files, self.slow = files, slow
        self.asked: list[str] = []

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        self.asked.append(attachment.ref)
        if attachment.ref in self.slow:
            await asyncio.sleep(60)
        if attachment.ref not in self.files:
            raise SendFailed("HTTP 404")
        return self.files[attachment.ref]


def doc(name: str, ref: str, size: int = 0) -> Attachment:
    return Attachment("document", name, "text/plain", size, ref)


async def test_files_are_read_in_order_or_named_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(images, "FETCH_DEADLINE_SECS", 0.5)
    monkeypatch.setattr(documents, "FETCH_DEADLINE_SECS", 0.5)
    files = Files(
        {"a": "\ufeffprint('hé')\n".encode(), "b": b"\x00\x01binary", "c": b"\xff\xfe bad"},
        slow=frozenset({"s"}),
    )
    blocks, missing = await read_texts(
        files,
        [
            doc("a.py", "a"),
            doc("b.txt", "b"),
            doc("c.txt", "c"),
            doc("gone.txt", "g"),
            doc("big.log", "x", size=10**7),
            doc("slow.txt", "s"),
        ],
        "t",
        Room(MAX_TEXT_TOKENS),
        DownloadBudget(10_000_000),
        pdf_limit=10_000_000,
    )
    assert blocks == ["--- a.py ---\nprint('hé')\n\n--- end of a.py ---"]
    assert missing == [
        "big.log: larger than 200000 bytes, not read",
        "b.txt: not UTF-8 text",
        "c.txt: not UTF-8 text",
        "gone.txt: could not be downloaded",
        "slow.txt: not downloaded in time",
    ]
    assert "x" not in files.asked


async def test_a_turn_s_files_share_one_allowance() -> None:
    """Counted in estimated tokens: 4 ASCII characters, or 1 CJK character, a token."""
    room = Room(100)
    files = Files({"1": b"x" * 360, "2": b"0123456789abcdefghij" * 2, "3": b"more"})
    blocks, missing = await read_texts(
        files,
        [doc("1.txt", "1"), doc("2.txt", "2")],
        "t",
        room,
        DownloadBudget(0),
        pdf_limit=10_000_000,
    )
    assert blocks[0] == f"--- 1.txt ---\n{'x' * 360}\n--- end of 1.txt ---"  # 90 tokens
    assert blocks[1].startswith("--- 2.txt ---\n0123456789abcdefghij")
    assert "[... cut here:" in blocks[1] and missing == []
    # the next message of the same turn (an album's next item) finds the room used up
    blocks, missing = await read_texts(
        files, [doc("3.txt", "3")], "t", room, DownloadBudget(0), pdf_limit=10_000_000
    )
    assert blocks == [] and missing == ["3.txt: not read, earlier files already fill the space"]


async def test_cjk_text_is_cut_by_tokens_not_characters() -> None:
    text = "漢字" * 5000  # 10,000 characters, ~10,000 tokens
    room = Room(1000)
    blocks, _ = await read_texts(
        Files({"c": text.encode()}),
        [doc("c.txt", "c")],
        "t",
        room,
        DownloadBudget(0),
        pdf_limit=10_000_000,
    )
    body = blocks[0].split("\n")[1]
    assert 900 <= len(body) <= 1000


def test_a_small_model_gets_a_smaller_allowance() -> None:
    from agent_core.agent.documents import allowance

    assert allowance(200_000) == MAX_TEXT_TOKENS
    assert allowance(16_000) == 4_000  # a quarter of the window
