"""The text of Word (.docx) and Excel (.xlsx) files a person posts, for the model.

:mod:`~agent_core.agent.documents` downloads such a file (up to ``MAX_ATTACHMENT_BYTES``,
like a PDF) and hands its bytes to :func:`read`, which runs on a reading thread of its
own (:data:`READER`), one Office file at a time per process.  Unlike a PDF (read in a
process of its own, :mod:`~agent_core.agent.pdfs`), the work a zip of XML can demand is
known before parsing starts: the caps below bound its memory (100-200 MB at most) and
its time (seconds) before either library sees a byte, so a thread is enough; an Office
file waits only behind another Office file, within the message's deadline.  A .docx is read with :mod:`docx` (python-docx), a
.xlsx with :mod:`openpyxl` in read-only mode with the values Excel saved (``data_only``:
never the formulas).

Both are zip files, and come from strangers, so before either library sees one:

* at most :data:`MAX_MEMBERS` files inside (real ones have a few dozen, one per picture
  or sheet more), and at most :data:`MAX_UNPACKED_BYTES` once unpacked, by the sizes the
  zip declares: :mod:`zipfile` never hands out more than a member's declared size (a
  member that unpacks to more fails its CRC check), so a zip bomb is refused before a
  byte of it is inflated;
* parsing XML takes 7 to 20 times its size in memory (measured: 10 MB of ordinary
  paragraphs, about 100 MB; 10 MB of empty ones, 215 MB).  python-docx builds every XML
  part of a document whole, so a .docx may hold at most :data:`MAX_MARKUP_BYTES` of
  anything an XML parser would read (judged from each member's first bytes, not its
  name, since a package may give any member any type); openpyxl in read-only mode
  streams the sheets but builds each row whole (about 30 times its size) and opens the
  workbook's other parts whole, so it reads through a meter: at most
  :data:`MAX_PART_BYTES` of any one part while it opens the workbook, and at most
  :data:`MAX_ROW_BYTES` of a sheet between two rows it hands over.

The reading itself is bounded like a PDF's: it stops once the text read fills the
turn's allowance (the tokens left in the :class:`~agent_core.agent.documents.Room` when
reading starts), at a cooperative deadline checked after each paragraph, table row or
sheet row (:data:`READ_SECS` from the start, and never past the message's own deadline
less :data:`MARGIN_SECS`; the first one is always read), and for a workbook after
:data:`MAX_SHEET_ROWS` rows with data in a sheet, :data:`MAX_COLUMNS` columns and
:data:`MAX_ROWS` rows looked at in all.  A job that starts after the message's deadline
reads nothing.

A Word file comes as its paragraphs and tables in document order (content controls
included), a heading marked ``#`` by its level, a list item ``- ``, a table as one line
a row with its cells between `` | ``.  A workbook comes sheet by sheet, ``--- sheet
Name ---`` and then its rows as CSV, empty trailing cells and empty rows left out.  A
file that cannot be read gives the reason instead: password-protected (such files are
not zips but OLE containers, as are the old .doc and .xls), too large once unpacked,
not readable as a Word or Excel file.
"""

from __future__ import annotations

import csv
import datetime
import io
import logging
import os
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, Literal, cast

import docx
from docx.oxml.ns import qn
from docx.table import Table
from docx.text.paragraph import Paragraph
from openpyxl.reader.excel import ExcelReader

from agent_core.agent.pdfs import MARGIN_SECS, READ_SECS, TOO_LATE
from agent_core.agent.tokens import text_tokens
from agent_core.events import Attachment

log = logging.getLogger(__name__)

Kind = Literal["word", "excel"]

MAX_MEMBERS = 2_000  # files inside the zip
MAX_UNPACKED_BYTES = 50_000_000  # all of them, once unpacked
MAX_MARKUP_BYTES = 10_000_000  # .docx: what python-docx parses whole (100-200 MB of memory)
MAX_PART_BYTES = 10_000_000  # .xlsx: of any one part, while the workbook is opened
MAX_ROW_BYTES = 1_000_000  # .xlsx: of a sheet between two rows (a row: ~30 MB of memory)
MAX_SHEET_ROWS = 1_000  # rows with data read from one sheet
MAX_COLUMNS = 200  # cells read from one row
MAX_ROWS = 50_000  # rows looked at in a workbook, empty ones included

# One reading thread per process, apart from the photos' and the default executor.
READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parley-office")
ZIP_SIGNATURE = b"PK\x03\x04"
OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # .doc, .xls, and password-protected ones

WORD_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
EXCEL_MIME = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
_EXTENSIONS: dict[str, Kind] = {".docx": "word", ".xlsx": "excel"}
# No type, or one that does not say which: the name decides (the bytes must be a zip).
# Some systems label a .docx / .xlsx upload with the old formats' types.
_VAGUE_MIMES = frozenset(
    {
        "application/octet-stream",
        "binary/octet-stream",
        "application/zip",
        "application/x-zip-compressed",
        "application/msword",
        "application/vnd.ms-excel",
    }
)

NOT_ZIP = "a zip file, but not a Word or Excel file"
TOO_MANY = f"too many parts in it (over {MAX_MEMBERS:,})"
TOO_LARGE = f"too large once unpacked (over {MAX_UNPACKED_BYTES // 1_000_000} MB)"
TOO_MUCH_XML = f"too large once unpacked (over {MAX_MARKUP_BYTES // 1_000_000} MB of text)"
PART_TOO_LARGE = f"too large once unpacked (a part over {MAX_PART_BYTES // 1_000_000} MB)"
NO_TEXT = "no text in it"
NO_DATA = "no data in it"
_FORMATS = {"word": (".docx", ".doc"), "excel": (".xlsx", ".xls")}  # (read, old)


def not_readable(kind: Kind) -> str:
    return f"not readable as {'a Word' if kind == 'word' else 'an Excel'} file"


def locked(kind: Kind) -> str:
    new, old = _FORMATS[kind]
    return f"password-protected, or an old {old} file rather than a {new} (not read)"


def kind_of(a: Attachment) -> Kind | None:
    """A Word or Excel file by its type or, when the platform gives none or a vague
    one, its name; None for anything else (.doc, .xls, .pptx... stay described)."""
    mime = a.mime.split(";", 1)[0].strip().lower()
    if mime == WORD_MIME:
        return "word"
    if mime == EXCEL_MIME:
        return "excel"
    if mime and mime not in _VAGUE_MIMES:
        return None
    return _EXTENSIONS.get(os.path.splitext(a.name.lower())[1])


def is_office(a: Attachment) -> bool:
    return kind_of(a) is not None


def looks_like_zip(data: bytes) -> bool:
    return data.startswith(ZIP_SIGNATURE)


@dataclass(frozen=True, slots=True)
class WordText:
    """What was read of a Word file: a line a paragraph or table row."""

    text: str
    blocks: int  # paragraphs and tables in the document
    starts: tuple[tuple[int, int], ...]  # (offset in text, block) of each line
    stopped: str = ""  # why the rest was left unread: "", "allowance", "time"
    at: int = 0  # the block reading stopped in

    @property
    def title(self) -> str:
        return "Word document"

    def _share(self, block: int) -> str:
        return f"about {min(99, max(1, 100 * block // max(1, self.blocks)))}%"

    def note(self, kept: int) -> str:
        """The line telling the model what it was not given, when ``kept`` characters of
        :attr:`text` go to it ("" when it has it all)."""
        if kept < len(self.text):
            block = max((b for s, b in self.starts if s <= kept), default=0)
            where = self._share(block)
            return f"[... cut here, {where} of the way through the document: no room for the rest]"
        if self.stopped:
            why = "reading it took too long" if self.stopped == "time" else "no room for the rest"
            return f"[... reading stopped {self._share(self.at + 1)} of the way through: {why}]"
        return ""


@dataclass(frozen=True, slots=True)
class ExcelText:
    """What was read of a workbook: a header a sheet, then a CSV line a row."""

    text: str
    sheets: tuple[str, ...]
    starts: tuple[tuple[int, int, int], ...]  # (offset in text, sheet, row; 0: its header)
    stopped: str = ""  # why the rest was left unread: "", "allowance", "time", "rows"
    at: tuple[int, int] = (0, 0)  # (sheet, row) reading stopped at

    @property
    def title(self) -> str:
        n = len(self.sheets)
        return f"Excel workbook, {n} sheet{'s' if n != 1 else ''}"

    def _where(self, sheet: int, row: int) -> str:
        return f"in sheet {self.sheets[sheet]}" + (f", row {row}" if row else "")

    def _unread(self, first: int) -> str:
        rest = self.sheets[first:]
        if not rest:
            return ""
        more = f" and {len(rest) - 10} more" if len(rest) > 10 else ""
        return f"; sheets not read: {', '.join(rest[:10])}{more}"

    def note(self, kept: int) -> str:
        """The line telling the model what it was not given, when ``kept`` characters of
        :attr:`text` go to it ("" when it has it all)."""
        if kept < len(self.text):
            _, sheet, row = max((m for m in self.starts if m[0] <= kept), default=(0, 0, 0))
            where = self._where(sheet, row)
            return f"[... cut here, {where}: no room for the rest{self._unread(sheet + 1)}]"
        if not self.stopped:
            return ""
        why = {
            "time": "reading it took too long",
            "rows": f"at most {MAX_ROWS:,} rows of a workbook are looked at",
        }.get(self.stopped, "no room for the rest")
        sheet, row = self.at
        if not row:  # before the sheet began
            return f"[... reading stopped before sheet {self.sheets[sheet]}: {why}{self._unread(sheet)}]"
        return f"[... reading stopped {self._where(sheet, row)}: {why}{self._unread(sheet + 1)}]"


OfficeText = WordText | ExcelText


def read(data: bytes, kind: Kind | None, tokens: int, give_up_at: float) -> OfficeText | str:
    """The text of the Word or Excel file in ``data`` (``kind`` is what its label says:
    its parts decide, None for a zip labelled as something else), or why it cannot be
    read.  Blocking: run on :data:`READER`."""
    try:
        return _read(data, kind, tokens, give_up_at)
    except Exception:  # the libraries' errors are caught closer in; this is the net
        log.exception("Office file not readable")
        return not_readable(kind) if kind else NOT_ZIP


def _read(data: bytes, kind: Kind | None, tokens: int, give_up_at: float) -> OfficeText | str:
    start = time.monotonic()
    if start >= give_up_at:
        return TOO_LATE
    stop_at = min(start + READ_SECS, give_up_at - MARGIN_SECS)
    if data.startswith(OLE_SIGNATURE):
        return locked(kind or "word")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        members = z.infolist()
    except Exception as exc:  # BadZipFile, and OSError / ValueError on a damaged one
        log.info("Office file not a zip: %s: %s", type(exc).__name__, exc)
        return not_readable(kind) if kind else NOT_ZIP
    names = {m.filename for m in members}
    found: Kind | None = (
        "word" if "word/document.xml" in names else "excel" if "xl/workbook.xml" in names else None
    )
    kind = found or kind
    if kind is None:
        return NOT_ZIP
    if len(members) > MAX_MEMBERS:
        return TOO_MANY
    if sum(m.file_size for m in members) > MAX_UNPACKED_BYTES:
        return TOO_LARGE
    if kind == "word":
        try:
            markup = _markup_bytes(z, members)
        except Exception as exc:  # a member that does not unpack: encrypted, damaged
            log.info("Word file not readable: %s: %s", type(exc).__name__, exc)
            return not_readable(kind)
        if markup > MAX_MARKUP_BYTES:
            return TOO_MUCH_XML
        return _read_word(data, tokens, stop_at)
    return _read_excel(data, tokens, stop_at)


# -- what an XML parser would read ------------------------------------------------------

# The starts libxml2 reads as XML (it detects UTF-16/32 and EBCDIC by them): anything
# else fails at its first byte, and costs nothing to parse.
_XML_STARTS = (
    b"<",
    b"\xef\xbb\xbf",  # UTF-8 byte-order mark
    b"\xfe\xff",  # UTF-16
    b"\xff\xfe",
    b"\x00<",
    b"\x00\x00\xfe\xff",  # UCS-4
    b"\x00\x00\x00<",
    b"\x00\x00<\x00",
    b"\x4c\x6f\xa7\x94",  # "<?xm" in EBCDIC
)


def _markup_bytes(z: zipfile.ZipFile, members: list[zipfile.ZipInfo]) -> int:
    """The unpacked bytes of the members an XML parser would read, judged from their
    first bytes (a member of only blanks at first counts too)."""
    if sum(m.file_size for m in members) <= MAX_MARKUP_BYTES:
        return 0  # cannot be over, whatever they are
    total = 0
    for m in members:
        if not m.file_size:
            continue
        with z.open(m) as f:
            head = f.read(256).lstrip(b" \t\r\n")
        if not head or head.startswith(_XML_STARTS):
            total += m.file_size
    return total


# -- Word ---------------------------------------------------------------------------

_P, _TBL, _SDT, _SDT_CONTENT = qn("w:p"), qn("w:tbl"), qn("w:sdt"), qn("w:sdtContent")


def _blocks(parent: Any, depth: int = 0) -> Iterator[Any]:
    """The paragraphs and tables in ``parent`` (the body), those in content controls
    (``w:sdt``, e.g. a cover page or a table of contents) in their place."""
    for el in parent.iterchildren():
        if el.tag in (_P, _TBL):
            yield el
        elif el.tag == _SDT and depth < 8:
            content = el.find(_SDT_CONTENT)
            if content is not None:
                yield from _blocks(content, depth + 1)


def _paragraph(p: Paragraph) -> str:
    text = p.text.strip()
    if not text:
        return ""
    try:
        style = (p.style.name or "") if p.style is not None else ""
    except Exception:  # a style part that does not say
        style = ""
    if style == "Title":
        return f"# {text}"
    level = style.removeprefix("Heading ")
    if level != style and level.isdigit() and 1 <= int(level) <= 9:
        return f"{'#' * int(level)} {text}"
    return f"- {text}" if style.startswith("List") else text


def _cell(cell: Any, depth: int) -> str:
    parts: list[str] = []
    for item in cell.iter_inner_content():
        if isinstance(item, Paragraph):
            parts.append(item.text.strip())
        elif depth < 2:  # a table in a cell: its rows, flattened
            parts.append(" / ".join(_rows(item, depth + 1)))
    return " ".join(" ".join(p for p in parts if p).split())


def _rows(table: Table, depth: int = 0) -> Iterator[str]:
    """A line a row, its cells between " | " (a cell spanning columns once)."""
    for row in table.rows:
        try:
            cells: list[str] = []
            prev = None
            for cell in row.cells:
                if cell != prev:
                    cells.append(_cell(cell, depth))
                prev = cell
        except Exception as exc:  # a damaged row, a vertical merge too deep to follow
            log.info("Word table row not readable: %s: %s", type(exc).__name__, exc)
            yield "[a table row that could not be read]"
            continue
        if any(cells):
            yield " | ".join(cells)


def _word_lines(document: Any, blocks: list[Any]) -> Iterator[tuple[int, str]]:
    for n, el in enumerate(blocks):
        if el.tag == _P:
            try:
                text = _paragraph(Paragraph(el, document))
            except Exception as exc:
                log.info("Word paragraph not readable: %s: %s", type(exc).__name__, exc)
                text = "[a paragraph that could not be read]"
            if text:
                yield n, text
        else:
            for line in _rows(Table(el, document)):
                yield n, line


def _read_word(data: bytes, tokens: int, stop_at: float) -> WordText | str:
    try:
        document = docx.Document(io.BytesIO(data))
        blocks = list(_blocks(document.element.body))
    except Exception as exc:  # not a Word document, damaged XML, a part missing...
        log.info("Word file not readable: %s: %s", type(exc).__name__, exc)
        return not_readable("word")
    parts: list[str] = []
    starts: list[tuple[int, int]] = []
    size = 0
    used = 0.0
    stopped = ""
    at = 0
    for n, line in _word_lines(document, blocks):
        # more than 4 characters a token of what is left would be cut anyway
        text = line[: 4 * max(0, int(tokens - used)) + 100]
        starts.append((size, n))
        parts.append(text + "\n")
        size += len(text) + 1
        used += text_tokens(text)
        if used > tokens:
            stopped, at = "allowance", n
            break
        if time.monotonic() >= stop_at:
            stopped, at = "time", n
            break
    if not parts:
        return NO_TEXT
    return WordText("".join(parts).rstrip("\n"), len(blocks), tuple(starts), stopped, at)


# -- Excel --------------------------------------------------------------------------


class _TooLarge(Exception):
    """openpyxl read more of a part, or of a sheet between two rows, than it may."""


class _Meter:
    """The bytes openpyxl has read since it opened a part or was handed a row."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def take(self, n: int) -> None:
        self.count += n
        if self.count > self.limit:
            raise _TooLarge


class _Metered(io.BufferedIOBase):
    """A member being read, counted by the meter."""

    def __init__(self, raw: IO[bytes], meter: _Meter) -> None:
        self._raw = raw
        self._meter = meter

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:  # ZipFile.read(): the whole part, chunk by chunk
            chunks = []
            while chunk := self.read(1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        data = self._raw.read(size)
        self._meter.take(len(data))
        return data

    def close(self) -> None:
        self._raw.close()
        super().close()


class _MeteredZip(zipfile.ZipFile):
    """The archive openpyxl reads a workbook from: each part it opens is metered."""

    def __init__(self, data: bytes, meter: _Meter) -> None:
        super().__init__(io.BytesIO(data))
        self.meter = meter

    def open(
        self,
        name: str | zipfile.ZipInfo,
        mode: Literal["r", "w"] = "r",
        pwd: bytes | None = None,
        *,
        force_zip64: bool = False,
    ) -> IO[bytes]:
        self.meter.count = 0
        raw = super().open(name, mode, pwd, force_zip64=force_zip64)
        return cast(IO[bytes], _Metered(raw, self.meter))


def _value(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, float):
        return f"{v:.15g}"  # the digits Excel shows
    if isinstance(v, datetime.datetime):
        return v.date().isoformat() if v.time() == datetime.time() else v.isoformat(" ")
    if isinstance(v, datetime.date | datetime.time):
        return v.isoformat()
    return str(v)


def _csv(values: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(values)
    return out.getvalue().rstrip("\n")


def _open_workbook(data: bytes, meter: _Meter) -> Any:
    reader = ExcelReader(io.BytesIO(data), read_only=True, data_only=True, keep_links=False)
    reader.archive.close()
    reader.archive = _MeteredZip(data, meter)  # read from the metered archive instead
    reader.read()
    return reader.wb


def _read_excel(data: bytes, tokens: int, stop_at: float) -> ExcelText | str:
    meter = _Meter(MAX_PART_BYTES)
    try:
        wb = _open_workbook(data, meter)
    except _TooLarge:
        return PART_TOO_LARGE
    except Exception as exc:  # not a workbook, damaged XML, a part missing...
        log.info("Excel file not readable: %s: %s", type(exc).__name__, exc)
        return not_readable("excel")
    try:
        return _sheets(wb, meter, tokens, stop_at)
    finally:
        wb.close()


def _sheets(wb: Any, meter: _Meter, tokens: int, stop_at: float) -> ExcelText | str:
    sheets = list(wb.worksheets)  # chart sheets have no cells: not among them
    names = tuple(" ".join(str(ws.title).split()) for ws in sheets)
    parts: list[str] = []
    starts: list[tuple[int, int, int]] = []
    size = 0
    used = 0.0
    looked = found = 0
    stopped = ""
    at = (0, 0)
    trouble = False  # a sheet not read to its end

    def add(line: str, sheet: int, row: int) -> None:
        nonlocal size, used
        line = line[: 4 * max(0, int(tokens - used)) + 100]
        starts.append((size, sheet, row))
        parts.append(line + "\n")
        size += len(line) + 1
        used += text_tokens(line)

    meter.limit = MAX_ROW_BYTES
    for i, ws in enumerate(sheets):
        if i and (used > tokens or time.monotonic() >= stop_at):
            stopped, at = ("allowance" if used > tokens else "time"), (i, 0)
            break
        add(f"--- sheet {names[i]} ---", i, 0)
        ws.reset_dimensions()  # the size a sheet declares may be wrong: read what is there
        given = row = 0
        wide = False
        try:
            for row, cells in enumerate(ws.iter_rows(max_col=MAX_COLUMNS + 1, values_only=True), 1):
                meter.count = 0  # a row handed over: the next may take MAX_ROW_BYTES again
                looked += 1
                values = [_value(v) for v in cells]
                if len(values) > MAX_COLUMNS:
                    wide = wide or any(values[MAX_COLUMNS:])
                    del values[MAX_COLUMNS:]
                while values and not values[-1]:
                    values.pop()
                if values and given == MAX_SHEET_ROWS:
                    add(f"[... at most {MAX_SHEET_ROWS:,} rows of a sheet are read]", i, row)
                    break
                if values:
                    add(_csv(values), i, row)
                    given += 1
                if used > tokens:
                    stopped = "allowance"
                elif looked >= MAX_ROWS:
                    stopped = "rows"
                elif time.monotonic() >= stop_at:
                    stopped = "time"
                if stopped:
                    at = (i, row)
                    break
        except _TooLarge:
            log.info("Excel sheet %d: a row or part of it too large to read", i + 1)
            add("[... the rest of this sheet is not read: a row too large to read]", i, row)
            trouble = True
        except Exception as exc:  # damaged XML further in
            log.info("Excel sheet %d not readable: %s: %s", i + 1, type(exc).__name__, exc)
            add("[... the rest of this sheet could not be read]", i, row)
            trouble = True
        found += given
        if wide:
            add(f"[... columns after the {MAX_COLUMNS}th are not read]", i, row)
        elif not given and not stopped and not trouble:
            add("[empty]", i, 0)
        if stopped:
            break
    if not found and not stopped and not trouble:
        return NO_DATA
    return ExcelText("".join(parts).rstrip("\n"), names, tuple(starts), stopped, at)
