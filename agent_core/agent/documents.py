"""Text files, PDFs, Word and Excel files a person posts read to the model.

Any model can read text, so these are downloaded whatever the model, through the
same optional :class:`~agent_core.agent.images.AttachmentFetcher` as photos: up to
:data:`MAX_TEXT_FILE_BYTES` for a text file and ``MAX_ATTACHMENT_BYTES`` for a PDF or
an Office file (bulky for the text they hold), and :data:`MAX_TEXT_TOKENS` (by Parley's
token estimate, which counts a CJK character as a token) for all files of one turn
together, fewer for a model with a small window (:func:`allowance`); the rest is
cut, and the model is told where.  Each file holds its size of the process's
:class:`~agent_core.agent.download_budget.DownloadBudget` from before its download
until it is decoded (a PDF or Office file: until its reading process has ended), within
the same deadline as photos.
The text joins the person's message, so it stays in the conversation like
anything they typed (compaction summarises it like the rest).

A file counts as text by its type (``text/*``, JSON, XML, YAML, JavaScript...) or,
when the platform gives none or a generic one, by its extension; it must decode
as UTF-8 and hold no NUL byte.  A PDF is one by its type (``application/pdf``) or
extension likewise, and must then hold ``%PDF-`` near its start; a file labelled as
text whose bytes start with ``%PDF-`` is read as the PDF it is.  A Word (.docx),
Excel (.xlsx) or PowerPoint (.pptx) file likewise (:mod:`~agent_core.agent.office`),
up to ``MAX_ATTACHMENT_BYTES`` as a PDF, read in the same kind of process.  Legacy
.doc, .xls and .ppt files and other binary formats are not read: they stay described
by name, type and size.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass

from agent_core.agent import office, pdfs
from agent_core.agent.doc_process import Readers, Share
from agent_core.agent.download_budget import DownloadBudget, Hold
from agent_core.agent.images import BUSY, FETCH_DEADLINE_SECS, AttachmentFetcher
from agent_core.agent.office import OfficeText, office_kind
from agent_core.agent.pdfs import PdfText, is_pdf, looks_like_pdf
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


class NotRead(Exception):
    """A file downloaded but not read; the message is the reason, for the model."""


@dataclass(slots=True)
class _Job:
    reading: bool = False  # downloaded: a document being read (or waiting for its turn)


async def _one(
    fetcher: AttachmentFetcher,
    a: Attachment,
    where: object,
    hold: Hold,
    limit: int,
    job: _Job,
    room: Room,
    give_up_at: float,
    share: Share,
    readers: Readers | None,
) -> str | PdfText | OfficeText:
    """The file's text, or :class:`NotRead` raised with the reason."""
    pdf = is_pdf(a)
    kind = office_kind(a)
    try:
        async with hold:
            data = await fetcher.fetch_attachment(a, limit)
            if kind is not None:
                job.reading = True
                # the bytes stay held until the reading process has ended (or was killed)
                read = await office.read_in_child(
                    data, kind, room.tokens, give_up_at, where, share, readers
                )
                if isinstance(read, str):
                    raise NotRead(read)
                return read
            if looks_like_pdf(data, labelled=pdf):
                job.reading = True
                # the bytes stay held until the reading process has ended (or was killed)
                got = await pdfs.read_in_child(data, room.tokens, give_up_at, where, share, readers)
                if not isinstance(got, str):
                    return got
                if pdf or got != pdfs.NOT_PDF:
                    raise NotRead(got)
                # labelled as text and beginning with "%PDF-", yet not a PDF: text after all
            elif pdf:
                raise NotRead(pdfs.NOT_PDF)
            text = decode(data)
    finally:
        if pdf or kind is not None:
            share.left -= 1  # counted in read_texts: the others' shares grow
    if text is None:
        raise NotRead("not UTF-8 text")
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
    if isinstance(exc, NotRead):
        return str(exc)
    text = str(exc)
    return text if text.startswith("file is larger than") else "could not be downloaded"


def _block(name: str, got: str | PdfText | OfficeText, room: Room) -> str:
    if isinstance(got, str):
        cut = room.take(got)
        tail = f"\n[... cut here: {len(got) - len(cut)} more characters]" if cut != got else ""
        return f"--- {name} ---\n{cut}{tail}\n--- end of {name} ---"
    if isinstance(got, OfficeText):
        cut = room.take(got.text)
        note = got.note(len(cut))
        body = cut + (f"\n{note}" if note else "")
        return f"--- {name} ({got.title}) ---\n{body}\n--- end of {name} ---"
    cut = room.take(got.text)
    note = got.note(len(cut))
    pages = f"{got.pages} page{'s' if got.pages != 1 else ''}"
    body = cut + (f"\n{note}" if note else "")
    return f"--- {name} (PDF, {pages}) ---\n{body}\n--- end of {name} ---"


async def read_texts(
    fetcher: AttachmentFetcher,
    files: list[Attachment],
    where: object,
    room: Room,
    budget: DownloadBudget,
    *,
    pdf_limit: int,
    readers: Readers | None = None,
) -> tuple[list[str], list[str]]:
    """(a block per file read, a line per file that could not be read), in order.

    Text files are downloaded up to :data:`MAX_TEXT_FILE_BYTES`, PDFs, Word and Excel
    files up to ``pdf_limit`` (``MAX_ATTACHMENT_BYTES``).  Each file holds its size (its
    cap when the platform gave none) of ``budget`` from before its download until it is
    decoded, or for a PDF or Office file until its reading process has ended (it is
    killed at the deadline).  ``readers``: how many reading processes at once and the
    memory of each (the settings'; None: the modules' defaults)."""
    give_up_at = time.monotonic() + FETCH_DEADLINE_SECS
    blocks: list[str] = []
    missing: list[str] = []
    todo: list[tuple[Attachment, int]] = []
    for a in files:
        limit = pdf_limit if is_pdf(a) or office_kind(a) else MAX_TEXT_FILE_BYTES
        if a.size and a.size > limit:
            missing.append(f"{a.name or '(unnamed)'}: larger than {limit} bytes, not read")
        else:
            todo.append((a, limit))
    holds = [budget.hold(a.size or limit) for a, limit in todo]
    share = Share(sum(1 for a, _ in todo if is_pdf(a) or office_kind(a)))
    jobs = [_Job() for _ in todo]
    tasks = [
        asyncio.ensure_future(
            _one(fetcher, a, where, h, limit, j, room, give_up_at, share, readers)
        )
        for (a, limit), h, j in zip(todo, holds, jobs, strict=True)
    ]
    if tasks:
        await asyncio.wait(tasks, timeout=FETCH_DEADLINE_SECS)
    for (a, _), h, j, t in zip(todo, holds, jobs, tasks, strict=True):
        name = a.name or "(unnamed)"
        if not t.done():
            busy = h.waiting  # asked first: cancelling the task ends the wait
            t.cancel()
            if busy:
                log.info("[%s] file %s: still waiting for %s", where, name, budget)
            if j.reading:
                log.info("[%s] document %s: not read by the deadline", where, name)
                missing.append(f"{name}: {pdfs.TOO_LATE}")
            else:
                missing.append(f"{name}: {BUSY if busy else 'not downloaded in time'}")
            continue
        if (exc := t.exception()) is not None:
            if isinstance(exc, NotRead):
                log.info("[%s] file %s not read: %s", where, name, exc)
            else:
                log.info("[%s] attachment %s not fetched: %s", where, name, exc)
            missing.append(f"{name}: {_reason(exc)}")
            continue
        if room.tokens <= 0:
            missing.append(f"{name}: not read, earlier files already fill the space")
            continue
        blocks.append(_block(name, t.result(), room))
    return blocks, missing
