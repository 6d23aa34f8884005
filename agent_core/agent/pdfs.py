"""The text of PDFs a person posts, for the model (with :mod:`pypdf`).

:mod:`~agent_core.agent.documents` downloads a PDF (up to ``MAX_ATTACHMENT_BYTES``) and
hands its bytes to :func:`read`, which runs here on one thread of its own per process
(:data:`_READER`), one PDF at a time.  Not the photos' decoding thread
(:mod:`~agent_core.agent.images`): a photo is prepared in milliseconds, a PDF can take
seconds, and photos of other conversations queued behind it would miss their deadline;
the cost is that one photo and one PDF may be decoded at the same time, which still
bounds the memory both take.

The work is bounded, so that a huge or hostile PDF cannot hold the thread for minutes:

* pages are read from the first, at most :data:`MAX_PAGES` of them;
* reading stops once the text read fills the turn's allowance of text (the tokens left
  in the :class:`~agent_core.agent.documents.Room` when reading starts: the room only
  shrinks, so the text read is never short of what will fit);
* a cooperative deadline is checked after each page: :data:`READ_SECS` from the start
  of reading, and never later than the message's own deadline (less a margin, so that
  what was read still reaches the model); the first page is always read;
* a job that starts after the message's deadline (it waited behind other PDFs) reads
  nothing;
* pypdf's own limits (decompressed stream sizes, page tree size, XObjects per page)
  stay as they are.

The text comes with page markers (``--- page 3 ---``) so the model can cite pages; a
PDF read only in part says how many pages it has and how many were read.  A PDF that
cannot be read gives the reason instead: password-protected (the empty password, which
many PDFs restricting only printing or copying are locked with, is tried first),
encrypted with AES while the ``cryptography`` package (a dependency) is missing, no text in it
(a scan: pictures of pages are not OCRed), or not readable as a PDF.
"""

from __future__ import annotations

import io
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError

from agent_core.agent.tokens import text_tokens
from agent_core.events import Attachment

log = logging.getLogger(__name__)

MAX_PAGES = 100  # a 15,000-token allowance is 20-30 pages of prose: more is slides or scans
READ_SECS = 15.0  # one PDF's reading, within the message's 30 s with its download
MARGIN_SECS = 1.0  # reading stops this long before the message's deadline
SIGNATURE = b"%PDF-"
# One reading thread per process, apart from the photos' and the default executor.
_READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parley-pdfs")

PASSWORD = "password-protected"
AES = "encrypted with AES, which this bot cannot decrypt"
NO_TEXT = "no text in it, perhaps a scan (pictures of pages are not read)"
NOT_PDF = "not readable as a PDF"
TOO_LATE = "not read in time (slow to read, or the bot was busy with other PDFs)"
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
                "pages": f"at most {MAX_PAGES} pages of a PDF are read",
                "time": "reading it took too long",
            }.get(self.stopped, "no room for the rest")
            read = (
                f"page 1 of {self.pages} was"
                if self.read == 1
                else f"pages 1-{self.read} of {self.pages} were"
            )
            return f"[... only {read} read: {why}]"
        return ""


def read(data: bytes, tokens: int, give_up_at: float) -> PdfText | str:
    """The text of the PDF in ``data``, or why it cannot be read.

    Reads pages from the first until ``tokens`` (estimated) are read, :data:`MAX_PAGES`
    pages, or the deadline (:data:`READ_SECS` from now, and :data:`MARGIN_SECS` before
    ``give_up_at``, a :func:`time.monotonic` time), whichever comes first.  Blocking:
    run on :data:`_READER`."""
    start = time.monotonic()
    if start >= give_up_at:
        return TOO_LATE
    stop_at = min(start + READ_SECS, give_up_at - MARGIN_SECS)
    try:
        reader = PdfReader(io.BytesIO(data))  # tries the empty password itself
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            return PASSWORD
        pages = len(reader.pages)
    except DependencyError:
        log.warning("a PDF is encrypted with AES: install 'cryptography' to read such PDFs")
        return AES
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
        if n >= MAX_PAGES:
            stopped = "pages"
            break
        try:
            text = reader.pages[n].extract_text().replace("\x00", "").strip()
        except DependencyError:
            log.warning("a PDF is encrypted with AES: install 'cryptography' to read such PDFs")
            return AES
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
