"""The text of PDFs a person posts, for the model (with :mod:`pypdf`).

:mod:`~agent_core.agent.documents` downloads a PDF (up to ``MAX_ATTACHMENT_BYTES``) and
hands its bytes to :func:`read_in_child`, which runs :func:`read` in a short-lived
process of its own (:mod:`~agent_core.agent.doc_process`), at most two at a time per
worker and one per conversation.
A PDF from a stranger can be built to make any parser work for minutes and take
gigabytes on a single page (a few KB of deflated drawing operators), and a parser
running in a thread cannot be stopped; a process can.  So:

* the reading process is killed a second after :data:`READ_SECS` or at the message's
  deadline, whichever comes first (the model is told the PDF was not read in time),
  and caps its own memory at :data:`CHILD_MEMORY_BYTES` (``RLIMIT_AS``; over it: "too
  large or too complex to read") and its CPU time (``RLIMIT_CPU``, so it ends even if
  the worker that started it died);
* the worker's memory and event loop are untouched by what happens in it; starting it
  costs ~0.3 s of CPU per PDF, which PDFs, rarer than messages, can afford;
* a PDF waits for the documents before it (its conversation's, or any while both
  slots are taken), within its message's deadline.

Inside, the work is bounded too, so that what was read reaches the model in time:

* pages are read from the first, at most :data:`MAX_PAGES` of them;
* reading stops once the text read fills the turn's allowance of text (the tokens left
  in the :class:`~agent_core.agent.documents.Room` when reading starts: the room only
  shrinks, so the text read is never short of what will fit);
* a cooperative deadline is checked after each page: :data:`READ_SECS` from the start
  of reading, and never later than the message's own deadline (less a margin); the
  first page is always read.

The text comes with page markers (``--- page 3 ---``) so the model can cite pages; a
PDF read only in part says how many pages it has and how many were read.  A PDF that
cannot be read gives the reason instead: password-protected (the empty password, which
many PDFs restricting only printing or copying are locked with, is tried first),
encrypted with AES while the ``cryptography`` package (a dependency) is missing, no text
in it (a scan: pictures of pages are not OCRed), not readable as a PDF, too large or
too complex, or not read in time.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError

from agent_core.agent import doc_process
from agent_core.agent.tokens import text_tokens
from agent_core.events import Attachment
from agent_core.textsafe import valid_text

log = logging.getLogger(__name__)

MAX_PAGES = 100  # a 15,000-token allowance is 20-30 pages of prose: more is slides or scans
READ_SECS = 15.0  # one PDF's reading, within the message's 30 s with its download
MARGIN_SECS = doc_process.MARGIN_SECS  # reading stops this long before the message's deadline
SIGNATURE = b"%PDF-"

PASSWORD = "password-protected"
AES = "encrypted with AES, which this bot cannot decrypt"
NO_TEXT = "no text in it, perhaps a scan (pictures of pages are not read)"
NOT_PDF = "not readable as a PDF"
TOO_LATE = doc_process.TOO_LATE
TOO_BIG = "too large or too complex to read (it needed more memory than a PDF may take)"
CHILD_MEMORY_BYTES = 512 * 1024 * 1024  # the reading process's address space
_MIMES = frozenset({"application/pdf", "application/x-pdf", "application/acrobat"})


def is_pdf(a: Attachment) -> bool:
    """A PDF by its type or, when the platform gives none or a generic one, its name."""
    mime = a.mime.split(";", 1)[0].strip().lower()
    if mime in _MIMES:
        return True
    if mime and mime not in ("application/octet-stream", "binary/octet-stream"):
        return False
    return a.name.lower().endswith(".pdf")


def looks_like_pdf(data: bytes, *, labelled: bool) -> bool:
    """The bytes of a PDF: ``%PDF-`` at the start.  A file labelled as one may have a
    little junk before it (readers accept it within the first 1024 bytes); a file
    labelled as text must start with it, else it is text that mentions it."""
    return SIGNATURE in data[:1024] if labelled else data.startswith(SIGNATURE)


@dataclass(frozen=True, slots=True)
class PdfText:
    """What was read of a PDF: the text with a marker before each page."""

    text: str
    pages: int  # in the PDF
    read: int  # pages read, from the first
    starts: tuple[int, ...]  # where each page's marker begins in ``text``
    stopped: str = ""  # why pages were left unread: "", "allowance", "pages", "time"

    def page_at(self, offset: int) -> int:
        """The page (1-based) the character at ``offset`` of :attr:`text` is in."""
        return max(1, sum(1 for s in self.starts if s <= offset))

    def note(self, kept: int) -> str:
        """The line telling the model what it was not given, when ``kept`` characters of
        :attr:`text` go to it ("" when it has it all)."""
        if kept < len(self.text):
            page = self.page_at(kept)
            return f"[... cut here, in page {page} of {self.pages}: no room for the rest]"
        if self.read < self.pages:
            why = {
                "pages": f"at most {self.read} pages of a PDF are read",
                "time": "reading it took too long",
            }.get(self.stopped, "no room for the rest")
            read = (
                f"page 1 of {self.pages} was"
                if self.read == 1
                else f"pages 1-{self.read} of {self.pages} were"
            )
            return f"[... only {read} read: {why}]"
        return ""


def read(
    data: bytes,
    tokens: int,
    give_up_at: float,
    *,
    read_secs: float | None = None,
    max_pages: int | None = None,
) -> PdfText | str:
    """The text of the PDF in ``data``, or why it cannot be read.

    Reads pages from the first until ``tokens`` (estimated) are read, :data:`MAX_PAGES`
    pages, or the deadline (:data:`READ_SECS` from now, and :data:`MARGIN_SECS` before
    ``give_up_at``, a :func:`time.monotonic` time), whichever comes first.  Blocking:
    run in the reading process (:func:`read_in_child`)."""
    start = time.monotonic()
    if start >= give_up_at:
        return TOO_LATE
    stop_at = min(start + (READ_SECS if read_secs is None else read_secs), give_up_at - MARGIN_SECS)
    page_cap = MAX_PAGES if max_pages is None else max_pages
    try:
        reader = PdfReader(io.BytesIO(data))  # tries the empty password itself
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            return PASSWORD
        pages = len(reader.pages)
    except DependencyError:
        log.warning("a PDF is encrypted with AES: install 'cryptography' to read such PDFs")
        return AES
    except MemoryError:
        return TOO_BIG
    except Exception as exc:  # pypdf raises its own errors, and ValueError, KeyError...
        log.info("PDF not readable: %s: %s", type(exc).__name__, exc)
        return NOT_PDF
    parts: list[str] = []
    starts: list[int] = []
    size = 0
    used = 0.0
    found = failed = 0
    stopped = ""
    for n in range(pages):
        if n >= page_cap:
            stopped = "pages"
            break
        try:
            # a ToUnicode map can give a lone surrogate (pypdf's "surrogatepass")
            text = valid_text(reader.pages[n].extract_text()).replace("\x00", "").strip()
        except DependencyError:
            log.warning("a PDF is encrypted with AES: install 'cryptography' to read such PDFs")
            return AES
        except MemoryError:
            return TOO_BIG
        except Exception as exc:
            log.info("PDF page %d not readable: %s: %s", n + 1, type(exc).__name__, exc)
            failed += 1
            text = "[this page could not be read]"
        else:
            found += bool(text)
            # more than 4 characters a token of what is left would be cut anyway
            text = text[: 4 * max(0, int(tokens - used)) + 100] or "[no text on this page]"
        part = f"--- page {n + 1} ---\n{text}\n"
        starts.append(size)
        parts.append(part)
        size += len(part)
        used += text_tokens(part)
        if n + 1 < pages and used > tokens:
            stopped = "allowance"
            break
        if n + 1 < pages and time.monotonic() >= stop_at:
            stopped = "time"
            break
    if not found:
        if not pages:
            return "no pages in it"
        if failed == len(parts):
            return NOT_PDF
        if len(parts) < pages:
            return NO_TEXT.replace("in it", f"in its first {len(parts)} of {pages} pages")
        return NO_TEXT
    return PdfText("".join(parts).rstrip("\n"), pages, len(parts), tuple(starts), stopped)


async def read_in_child(
    data: bytes,
    tokens: int,
    give_up_at: float,
    queue: Hashable = None,
    share: doc_process.Share | None = None,
    readers: doc_process.Readers | None = None,
) -> PdfText | str:
    """:func:`read` in a process of its own (:func:`~agent_core.agent.doc_process.run`),
    killed at ``give_up_at`` (a :func:`time.monotonic` time) or a second after
    :data:`READ_SECS`; waiting for the documents before it (of its ``queue``, a
    conversation, or for a free slot) counts."""
    args: dict[str, object] = {
        "tokens": tokens,
        "read_secs": READ_SECS,
        "max_pages": MAX_PAGES,
        "memory": CHILD_MEMORY_BYTES,
    }
    got = await doc_process.run(
        "pdf", data, args, give_up_at, too_big=TOO_BIG, queue=queue, share=share, readers=readers
    )
    if "error" in got:
        return str(got["error"])
    try:
        return PdfText(
            str(got["text"]),
            int(got["pages"]),
            int(got["read"]),
            tuple(int(x) for x in got["starts"]),
            str(got["stopped"]),
        )
    except (KeyError, TypeError, ValueError):
        log.warning("the PDF reading process gave an answer of the wrong shape")
        return doc_process.FAILED
