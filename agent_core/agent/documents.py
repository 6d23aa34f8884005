"""Text files a person posts (notes, code, logs, CSV, JSON...) read to the model.

Any model can read text, so these are downloaded whatever the model, through the
same optional :class:`~agent_core.agent.images.AttachmentFetcher` as photos: up to
:data:`MAX_TEXT_FILE_BYTES` each, and :data:`MAX_TEXT_CHARS` characters for all
files of one message together, fewer for a model with a small window
(:func:`allowance`); the rest is cut, and the model is told where.
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

from agent_core.agent.images import FETCH_DEADLINE_SECS, AttachmentFetcher
from agent_core.events import Attachment

log = logging.getLogger(__name__)

MAX_TEXT_FILE_BYTES = 200_000
MAX_TEXT_CHARS = 60_000  # all text files of one message (about 15,000 tokens)

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


async def _one(fetcher: AttachmentFetcher, a: Attachment, where: object) -> str | None:
    """The file's text, or None with the reason logged."""
    data = await fetcher.fetch_attachment(a, MAX_TEXT_FILE_BYTES)
    text = decode(data)
    if text is None:
        log.info("[%s] %s is not UTF-8 text", where, a.name)
    return text


def allowance(context_window: int) -> int:
    """Characters of text files for one message: :data:`MAX_TEXT_CHARS`, and no more
    than about a quarter of the model's window (some 4 characters per token)."""
    return max(1000, min(MAX_TEXT_CHARS, context_window)) if context_window > 0 else MAX_TEXT_CHARS


async def read_texts(
    fetcher: AttachmentFetcher,
    files: list[Attachment],
    where: object,
    max_chars: int = MAX_TEXT_CHARS,
) -> tuple[list[str], list[str]]:
    """(a block per file read, a line per file that could not be read), in order."""
    blocks: list[str] = []
    missing: list[str] = []
    room = max_chars
    todo = []
    for a in files:
        name = a.name or "(unnamed)"
        if a.size and a.size > MAX_TEXT_FILE_BYTES:
            missing.append(f"{name}: larger than {MAX_TEXT_FILE_BYTES} bytes, not read")
        else:
            todo.append(a)
    tasks = [asyncio.ensure_future(_one(fetcher, a, where)) for a in todo]
    if tasks:
        await asyncio.wait(tasks, timeout=FETCH_DEADLINE_SECS)
    for a, t in zip(todo, tasks, strict=True):
        name = a.name or "(unnamed)"
        if not t.done():
            t.cancel()
            missing.append(f"{name}: not downloaded in time")
            continue
        if t.exception() is not None:
            log.info("[%s] attachment %s not fetched: %s", where, name, t.exception())
            missing.append(f"{name}: could not be downloaded")
            continue
        text = t.result()
        if text is None:
            missing.append(f"{name}: not UTF-8 text")
            continue
        if room <= 0:
            missing.append(f"{name}: not read, the message's files already fill the space")
            continue
        cut = text[:room]
        room -= len(cut)
        tail = f"\n[... cut here: {len(text) - len(cut)} more characters]" if cut != text else ""
        blocks.append(f"--- {name} ---\n{cut}{tail}\n--- end of {name} ---")
    return blocks, missing
