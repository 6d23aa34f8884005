"""Text files a person posts (notes, code, logs, CSV, JSON...) read to the model.

Any model can read text, so these are downloaded whatever the model, through the
same optional :class:`~agent_core.agent.images.AttachmentFetcher` as photos: up to
:data:`MAX_TEXT_FILE_BYTES` each, and :data:`MAX_TEXT_TOKENS` (by Parley's token
estimate, which counts a CJK character as a token) for all files of one turn
together, fewer for a model with a small window (:func:`allowance`); the rest is
cut, and the model is told where.  Each file holds its size of the process's
:class:`~agent_core.agent.download_budget.DownloadBudget` from before its download
until it is decoded, within the same deadline as photos.
The text joins the person's message, so it stays in the conversation like
anything they typed (compaction summarises it like the rest).

A file counts as text by its type (``text/*``, JSON, XML, YAML, JavaScript...) or,
when the platform gives none or a generic one, by its extension; it must decode
as UTF-8 and hold no NUL byte.  PDFs, Office files and other binary formats are
not read: they stay described by name, type and size.
"""

from __future__ import annotations

import asyncio
import logging
import os

from agent_core.agent.download_budget import DownloadBudget, Hold
from agent_core.agent.images import BUSY, FETCH_DEADLINE_SECS, AttachmentFetcher
from agent_core.agent.tokens import text_tokens
from agent_core.events import Attachment

log = logging.getLogger(__name__)

MAX_TEXT_FILE_BYTES = 200_000
MAX_TEXT_TOKENS = 15_000  # all text files of one turn (about 60,000 characters of English)

_TEXT_MIMES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/x-python",
        "application/sql",
        "application/x-ndjson",
    }
)
_TEXT_EXTENSIONS = frozenset(
    [
        ".txt",
        ".md",
        ".markdown",
        ".rst",
        ".csv",
        ".tsv",
        ".json",
        ".jsonl",
        ".ndjson",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".conf",
        ".env.example",
        ".log",
        ".xml",
        ".html",
        ".htm",
        ".css",
        ".scss",
        ".js",
        ".mjs",
        ".ts",
        ".tsx",
        ".jsx",
        ".py",
        ".rb",
        ".go",
        ".rs",
        ".java",
        ".kt",
        ".swift",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".php",
        ".pl",
        ".lua",
        ".r",
        ".sql",
        ".sh",
        ".bash",
        ".zsh",
        ".ps1",
        ".bat",
        ".dockerfile",
        ".tf",
        ".hcl",
        ".proto",
        ".graphql",
        ".vue",
        ".svelte",
        ".tex",
        ".diff",
        ".patch",
        ".srt",
        ".vtt",
    ]
)


def is_text(a: Attachment) -> bool:
    mime = a.mime.split(";", 1)[0].strip().lower()
    if mime.startswith("text/") or mime in _TEXT_MIMES:
        return True
    if mime and mime not in ("application/octet-stream", "binary/octet-stream"):
        return False  # a type that says what it is, and it is not text
    name = a.name.lower()
    return os.path.splitext(name)[1] in _TEXT_EXTENSIONS or name in ("dockerfile", "makefile")


def decode(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


async def _one(fetcher: AttachmentFetcher, a: Attachment, where: object, hold: Hold) -> str | None:
    """The file's text, or None with the reason logged."""
    async with hold:
        text = decode(await fetcher.fetch_attachment(a, MAX_TEXT_FILE_BYTES))
    if text is None:
        log.info("[%s] %s is not UTF-8 text", where, a.name)
    return text


def allowance(context_window: int) -> int:
    """Tokens of text files for one turn: :data:`MAX_TEXT_TOKENS`, and no more than a
    quarter of the model's window."""
    return max(250, min(MAX_TEXT_TOKENS, context_window // 4))


class Room:
    """What is left of a turn's allowance (shared by all its messages: an album of
    documents, the messages held during an approval)."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def take(self, text: str) -> str:
        """The part of ``text`` that fits (by the token estimate), taken from the room."""
        need = text_tokens(text)
        if need <= self.tokens:
            self.tokens -= int(need) + 1
            return text
        cut = text[: max(0, int(len(text) * self.tokens / need))]
        while cut and text_tokens(cut) > self.tokens:
            cut = cut[: len(cut) * 9 // 10]
        self.tokens = 0
        return cut


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return text if text.startswith("file is larger than") else "could not be downloaded"


async def read_texts(
    fetcher: AttachmentFetcher,
    files: list[Attachment],
    where: object,
    room: Room,
    budget: DownloadBudget,
) -> tuple[list[str], list[str]]:
    """(a block per file read, a line per file that could not be read), in order.

    Each file holds its size (:data:`MAX_TEXT_FILE_BYTES` when the platform gave none)
    of ``budget`` from before its download until it is decoded."""
    blocks: list[str] = []
    missing: list[str] = []
    todo = []
    for a in files:
        name = a.name or "(unnamed)"
        if a.size and a.size > MAX_TEXT_FILE_BYTES:
            missing.append(f"{name}: larger than {MAX_TEXT_FILE_BYTES} bytes, not read")
        else:
            todo.append(a)
    holds = [budget.hold(a.size or MAX_TEXT_FILE_BYTES) for a in todo]
    tasks = [
        asyncio.ensure_future(_one(fetcher, a, where, h)) for a, h in zip(todo, holds, strict=True)
    ]
    if tasks:
        await asyncio.wait(tasks, timeout=FETCH_DEADLINE_SECS)
    for a, h, t in zip(todo, holds, tasks, strict=True):
        name = a.name or "(unnamed)"
        if not t.done():
            busy = h.waiting  # asked first: cancelling the task ends the wait
            t.cancel()
            if busy:
                log.info("[%s] file %s: still waiting for %s", where, name, budget)
            missing.append(f"{name}: {BUSY if busy else 'not downloaded in time'}")
            continue
        if (exc := t.exception()) is not None:
            log.info("[%s] attachment %s not fetched: %s", where, name, exc)
            missing.append(f"{name}: {_reason(exc)}")
            continue
        text = t.result()
        if text is None:
            missing.append(f"{name}: not UTF-8 text")
            continue
        if room.tokens <= 0:
            missing.append(f"{name}: not read, earlier files already fill the space")
            continue
        cut = room.take(text)
        tail = f"\n[... cut here: {len(text) - len(cut)} more characters]" if cut != text else ""
        blocks.append(f"--- {name} ---\n{cut}{tail}\n--- end of {name} ---")
    return blocks, missing
