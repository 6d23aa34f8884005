"""The text of Word (.docx), Excel (.xlsx) and PowerPoint (.pptx) files a person
posts, for the model.

:mod:`~agent_core.agent.documents` downloads such a file (up to
``MAX_ATTACHMENT_BYTES``, like a PDF) and hands its bytes to :func:`read_in_child`,
which reads it in a short-lived process of its own
(:mod:`~agent_core.agent.doc_process`, with :mod:`~agent_core.agent.office_read`
and :mod:`~agent_core.agent.slides_read` inside), at most ``DOCUMENT_READERS`` at a
time per worker and one per conversation, killed a second after its
:data:`READ_SECS` (or at the message's deadline), its memory capped at
``DOCUMENT_MEMORY_MB`` (:data:`CHILD_MEMORY_BYTES` when none is given).  Nothing of the file is parsed in the worker: only its
first bytes are looked at here.

These files are zip archives of XML, so a small one can unpack to gigabytes (a zip
bomb), python-docx's own table API is quadratic in merged cells (a 36 KB file of
vertically merged empty rows held a reading thread for hours), and openpyxl reads all
of a workbook's shared strings before its first row (3 million of them: 30 s).  So,
in the reading process:

* the zip's directory is checked before anything is unpacked: at most
  :data:`MAX_UNZIPPED_BYTES` in all, :data:`MAX_PART_BYTES` for any one file in it
  (the document's XML, a sheet, the shared strings...), :data:`MAX_ZIP_MEMBERS`
  files.  The sizes the directory declares are safe bounds: Python's zipfile never
  unpacks more than a member declares (a member that holds more fails its CRC check);
* a Word file's body is walked in the XML itself (paragraphs and tables in order, a
  table row by row), never through python-docx's cell API; an Excel file is read with
  openpyxl in read-only mode, the first :data:`MAX_SHEET_ROWS` rows and
  :data:`MAX_SHEET_COLUMNS` columns of each sheet; a presentation's slides are taken in
  the order it shows them (python-pptx) and each slide's shapes walked in its XML;
* the deadline (:data:`READ_SECS` from when the file is open, never past the
  process's kill) is checked at each paragraph and each row, the first row or
  paragraph always read, and reading stops once the text read fills the turn's
  allowance of text, as for PDFs.

A file is one by its type or, when the platform gives none or a generic one, its name
(``.docx``, ``.xlsx``, ``.pptx``), and must start with a zip's ``PK\\x03\\x04``.
Password-protected Office files are not zips but OLE (CFB) containers holding an
``EncryptedPackage``; other CFB files are the old binary formats (.doc, .xls, .ppt),
not read.  Files named or typed as the old formats are not counted as Office files
here at all: they stay described by name, type and size.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Literal

from agent_core.agent import doc_process
from agent_core.events import Attachment

log = logging.getLogger(__name__)

Kind = Literal["docx", "xlsx", "pptx"]

READ_SECS = 15.0  # one file's reading, within the message's 30 s with its download
MAX_UNZIPPED_BYTES = 100_000_000  # all files in the zip, as its directory declares them
MAX_ZIP_MEMBERS = 10_000  # a large workbook has a few hundred
# any one file in the zip: a Word body of ~4,000 pages, a sheet of ~500,000 cells,
# ~1.3 million shared strings (openpyxl opens those in ~15 s)
MAX_PART_BYTES = 25_000_000
MAX_SHEET_ROWS = 2_000  # rows 1-2000 of each sheet (15,000 tokens hold ~1,500 short rows)
MAX_SHEET_COLUMNS = 50  # columns A-AX of each sheet
CHILD_MEMORY_BYTES = 512 * 1024 * 1024  # the reading process's address space

ZIP_SIGNATURE = b"PK\x03\x04"
CFB_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # OLE: old formats, encrypted new ones

PASSWORD = "password-protected"
NOT_DOCX = "not a Word document (.docx)"
NOT_XLSX = "not an Excel workbook (.xlsx)"
NOT_PPTX = "not a PowerPoint presentation (.pptx)"
NOT_KIND: dict[Kind, str] = {"docx": NOT_DOCX, "xlsx": NOT_XLSX, "pptx": NOT_PPTX}
OLD_DOC = "in the old Word format (.doc), which is not read"
OLD_XLS = "in the old Excel format (.xls), which is not read"
OLD_PPT = "in the old PowerPoint format (.ppt), which is not read"
OLD_KIND: dict[Kind, str] = {"docx": OLD_DOC, "xlsx": OLD_XLS, "pptx": OLD_PPT}
NO_TEXT = "no text in it"
NO_VALUES = "no values in it"
TOO_LATE = doc_process.TOO_LATE
TOO_BIG = "too large or too complex to read (it needed more memory than a document may take)"
TOO_COMPLEX = (
    "too large or too complex to read (its XML nests too deeply or is too big in one piece)"
)
DAMAGED_XLSX = "damaged (a cell in it could not be read)"
FAILED = doc_process.FAILED

_MIMES: dict[str, Kind] = {
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
}
_EXTENSIONS: dict[str, Kind] = {".docx": "docx", ".xlsx": "xlsx", ".pptx": "pptx"}


def office_kind(a: Attachment) -> Kind | None:
    """ "docx", "xlsx" or "pptx" by the file's type or, when the platform gives none
    or a generic one, its name; None for anything else (.doc, .xls, .ppt included)."""
    mime = a.mime.split(";", 1)[0].strip().lower()
    if mime in _MIMES:
        return _MIMES[mime]
    if mime and mime not in ("application/octet-stream", "binary/octet-stream"):
        return None
    return _EXTENSIONS.get(os.path.splitext(a.name.lower())[1])


def refusal(data: bytes, kind: Kind) -> str:
    """Why ``data``, labelled ``kind``, is not even handed to the reading process (""
    when it looks like a zip, as .docx, .xlsx and .pptx files are)."""
    if data.startswith(ZIP_SIGNATURE):
        return ""
    if data.startswith(CFB_SIGNATURE):
        # an encrypted .docx/.xlsx/.pptx keeps its zip in a stream named so (UTF-16)
        if "EncryptedPackage".encode("utf-16-le") in data:
            return PASSWORD
        return OLD_KIND[kind]
    return NOT_KIND[kind]


@dataclass(frozen=True, slots=True)
class OfficeText:
    """What was read of a Word, Excel or PowerPoint file."""

    text: str
    kind: Kind
    sheets: int = 0  # in the workbook, or the presentation's slides (a Word file: 0)
    # where each sheet's (slide's) marker is, and how a note names it there:
    # "sheet 2 of 3 (Data)", "slide 12 of 40 (Results)"
    starts: tuple[tuple[int, str], ...] = ()
    stopped: str = ""  # why the rest was left unread: "", "allowance", "time"

    @property
    def title(self) -> str:
        if self.kind == "docx":
            return "Word document"
        plural = "s" if self.sheets != 1 else ""
        if self.kind == "pptx":
            return f"PowerPoint presentation, {self.sheets} slide{plural}"
        return f"Excel workbook, {self.sheets} sheet{plural}"

    def _where(self, offset: int) -> str:
        if not self.starts:
            return ""
        n = max(1, sum(1 for s, _ in self.starts if s <= offset))
        return f", in {self.starts[n - 1][1]}"

    def note(self, kept: int) -> str:
        """The line telling the model what it was not given, when ``kept`` characters of
        :attr:`text` go to it ("" when it has it all)."""
        if kept < len(self.text):
            return f"[... cut here{self._where(kept)}: no room for the rest]"
        if self.stopped:
            why = "reading it took too long" if self.stopped == "time" else "no room for the rest"
            return f"[... not read to the end{self._where(len(self.text))}: {why}]"
        return ""


async def read_in_child(
    data: bytes,
    kind: Kind,
    tokens: int,
    give_up_at: float,
    queue: Hashable = None,
    share: doc_process.Share | None = None,
    readers: doc_process.Readers | None = None,
) -> OfficeText | str:
    """The text of the ``kind`` file in ``data`` read in a process of its own, killed at
    ``give_up_at`` (a :func:`time.monotonic` time) or a second after :data:`READ_SECS`,
    or why it was not read; waiting for the documents before it (of its ``queue``, a
    conversation, or for a free slot) counts."""
    if problem := refusal(data, kind):
        return problem
    args: dict[str, object] = {
        "tokens": tokens,
        "read_secs": READ_SECS,
        "memory": CHILD_MEMORY_BYTES,
        "max_unzipped": MAX_UNZIPPED_BYTES,
        "max_members": MAX_ZIP_MEMBERS,
        "max_part": MAX_PART_BYTES,
        "max_rows": MAX_SHEET_ROWS,
        "max_columns": MAX_SHEET_COLUMNS,
    }
    got = await doc_process.run(
        kind, data, args, give_up_at, too_big=TOO_BIG, queue=queue, share=share, readers=readers
    )
    if "error" in got:
        return str(got["error"])
    try:
        return OfficeText(
            str(got["text"]),
            kind,
            int(got["sheets"]),
            tuple((int(s), str(name)) for s, name in got["starts"]),
            str(got["stopped"]),
        )
    except (KeyError, TypeError, ValueError):
        log.warning("the %s reading process gave an answer of the wrong shape", kind)
        return FAILED
