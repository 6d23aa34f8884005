"""Reading a Word (.docx) or Excel (.xlsx) file, inside the reading process; the
shared part of reading a PowerPoint file too (:mod:`~agent_core.agent.slides_read`).

Run only in ``python -m agent_core.agent.doc_child`` (see
:mod:`~agent_core.agent.office` for why and for the limits): python-docx, openpyxl,
python-pptx and lxml are imported here, never in the worker.  Every function is
blocking.
"""

from __future__ import annotations

import datetime as dt
import io
import itertools
import logging
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agent_core.agent.doc_process import MARGIN_SECS
from agent_core.agent.office import (
    DAMAGED_XLSX,
    NO_TEXT,
    NO_VALUES,
    NOT_KIND,
    TOO_BIG,
    TOO_COMPLEX,
    TOO_LATE,
    Kind,
    OfficeText,
)
from agent_core.agent.tokens import text_tokens
from agent_core.textsafe import valid_text

log = logging.getLogger(__name__)

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_P, _TBL, _TR, _TC, _R = _W + "p", _W + "tbl", _W + "tr", _W + "tc", _W + "r"
# wrappers whose content is read as if it stood in their place
_WRAPPERS = frozenset(
    _W + t
    for t in (
        "sdt",
        "sdtContent",
        "customXml",
        "smartTag",
        "hyperlink",
        "ins",
        "moveTo",
        "fldSimple",
    )
)
_RUN_TEXT = {_W + "tab": "\t", _W + "br": "\n", _W + "cr": "\n", _W + "noBreakHyphen": "-"}


@dataclass(frozen=True, slots=True)
class Limits:
    """The caps of :mod:`~agent_core.agent.office`, as the worker sent them."""

    read_secs: float
    max_unzipped: int
    max_members: int
    max_part: int
    max_rows: int
    max_columns: int


def zip_refusal(data: bytes, kind: Kind, limits: Limits) -> str:
    """Why the zip in ``data`` is not unpacked ("" when it may be), from its directory
    alone.  Python's zipfile stops at the size a member declares (and fails its CRC
    check if it holds more), so the declared sizes bound what reading it can unpack,
    whatever the compressed sizes declared."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError):
        return NOT_KIND[kind]
    if len(members) > limits.max_members:
        return f"holds more than {limits.max_members} files inside (perhaps a zip bomb)"
    if sum(m.file_size for m in members) > limits.max_unzipped:
        return f"unzips to more than {limits.max_unzipped // 1_000_000} MB (perhaps a zip bomb)"
    for m in members:
        if m.file_size > limits.max_part:
            return (
                f"too large to read: {m.filename[:100]} in it unzips to more than"
                f" {limits.max_part // 1_000_000} MB"
            )
    return ""


@dataclass(slots=True)
class _Out:
    """The text read so far, within the allowance and the deadline."""

    tokens: int
    stop_at: float = float("inf")  # set once the file is open: see start
    parts: list[str] = field(default_factory=list)
    size: int = 0
    used: float = 0.0
    lines: int = 0  # paragraphs and rows (a slide's lines, empty slides) read
    stopped: str = ""

    def start(self, read_secs: float, give_up_at: float) -> None:
        """The file is open: reading may go on ``read_secs`` from now, and until
        :data:`MARGIN_SECS` before ``give_up_at``."""
        self.stop_at = min(time.monotonic() + read_secs, give_up_at - MARGIN_SECS)

    def done(self) -> bool:
        """Whether to stop before the next paragraph or row (and why, in ``stopped``);
        the first paragraph or row is always read."""
        if self.used > self.tokens:
            self.stopped = "allowance"
        elif self.lines and time.monotonic() >= self.stop_at:
            self.stopped = "time"
        return bool(self.stopped)

    def passed(self) -> None:
        """A part with no line of its own (an empty slide) counts for the deadline."""
        self.lines += 1

    def line(self, line: str) -> None:
        """A paragraph or a row."""
        self.lines += 1
        self.add(line)

    def add(self, line: str) -> None:
        """A line of its own: a sheet's marker, a note."""
        # more than 4 characters a token of what is left would be cut anyway
        line = valid_text(line[: 4 * max(0, int(self.tokens - self.used)) + 100]) + "\n"
        self.parts.append(line)
        self.size += len(line)
        self.used += text_tokens(line)

    def text(self) -> str:
        return "".join(self.parts).rstrip("\n")


def read(
    kind: Kind, data: bytes, tokens: int, give_up_at: float, limits: Limits
) -> OfficeText | str:
    """The text of the ``kind`` file in ``data``, or why it cannot be read.

    Reads until ``tokens`` (estimated) are read or the deadline (``limits.read_secs``
    from when the file is open, and :data:`~agent_core.agent.doc_process.MARGIN_SECS`
    before ``give_up_at``, a :func:`time.monotonic` time: when the process is killed),
    checked at each paragraph and row."""
    if time.monotonic() >= give_up_at - MARGIN_SECS:
        return TOO_LATE
    if problem := zip_refusal(data, kind, limits):
        return problem
    out = _Out(tokens)
    got: OfficeText | str
    try:
        if kind == "docx":
            got = _docx(data, out, limits, give_up_at)
        elif kind == "pptx":
            from agent_core.agent.slides_read import pptx_text

            got = pptx_text(data, out, limits, give_up_at)
        else:
            got = _xlsx(data, out, limits, give_up_at)
    except Exception as exc:  # the libraries raise KeyError, ValueError, their own...
        log.info("%s not readable: %s: %s", kind, type(exc).__name__, exc)
        return _failure(exc) or NOT_KIND[kind]
    if isinstance(got, str):
        return got
    if not got.text.strip():
        return TOO_LATE if out.stopped == "time" else NO_VALUES if kind == "xlsx" else NO_TEXT
    return got


# libxml2's limits on one document (XML_PARSE_HUGE unset): nesting deeper than 256, a
# text node over 10 MB, entities expanding too much
_LIMIT_ERRORS = frozenset({"ERR_RESOURCE_LIMIT", "ERR_ENTITY_LOOP", "ERR_ENTITY_AMPLIFICATION"})
# expat's XML_ERROR_AMPLIFICATION_LIMIT_BREACH (entities expanding too much)
_EXPAT_AMPLIFICATION = 43


def _failure(exc: BaseException | None) -> str:
    """The reason for ``exc`` (or what it was raised from) when it is a limit rather
    than damage: the memory cap (a MemoryError, or libxml2 out of memory), or one of
    libxml2's limits; "" otherwise."""
    while exc is not None:
        if isinstance(exc, MemoryError):
            return TOO_BIG
        if isinstance(exc, RecursionError):  # parts related to parts... thousands deep
            return TOO_COMPLEX
        types = {getattr(e, "type_name", "") for e in getattr(exc, "error_log", None) or ()}
        if "ERR_NO_MEMORY" in types:
            return TOO_BIG
        if types & _LIMIT_ERRORS:
            return TOO_COMPLEX
        if getattr(exc, "code", None) == _EXPAT_AMPLIFICATION:  # openpyxl parses with expat
            return TOO_COMPLEX
        exc = exc.__cause__ or exc.__context__
    return ""


# --- Word ---------------------------------------------------------------------------


def _docx(data: bytes, out: _Out, limits: Limits, give_up_at: float) -> OfficeText:
    import docx

    document = docx.Document(io.BytesIO(data))
    out.start(limits.read_secs, give_up_at)
    headings: dict[str, str] = {}  # style id -> "#" marks, for the heading styles
    for style in document.styles.element.iterchildren(_W + "style"):
        name_el = style.find(_W + "name")
        name = (name_el.get(_W + "val") if name_el is not None else "") or ""
        level = _heading_level(name.lower())
        if level:
            headings[style.get(_W + "styleId") or ""] = "#" * level + " "
    for el in _blocks(document.element.body):
        if out.done():
            break
        if el.tag == _P:
            text = _para_text(el).strip()
            if text:
                out.line(_heading(el, headings) + text)
        else:
            _table(el, out)
    return OfficeText(out.text(), "docx", stopped=out.stopped)


def _heading_level(name: str) -> int:
    if name == "title":
        return 1
    if name.startswith("heading ") and name[8:].isdigit():
        return min(6, int(name[8:]))
    return 0


def _heading(p: Any, headings: dict[str, str]) -> str:
    ppr = p.find(_W + "pPr")
    style = ppr.find(_W + "pStyle") if ppr is not None else None
    return headings.get(style.get(_W + "val") or "", "") if style is not None else ""


def _blocks(parent: Any) -> Iterator[Any]:
    """The paragraphs and tables in ``parent`` (the body, a cell), in order."""
    for el in parent.iterchildren():
        if el.tag in (_P, _TBL):
            yield el
        elif el.tag in _WRAPPERS:
            yield from _blocks(el)


def _cells(parent: Any, tag: str) -> Iterator[Any]:
    """The ``w:tr`` of a table or the ``w:tc`` of a row, content controls opened."""
    for el in parent.iterchildren():
        if el.tag == tag:
            yield el
        elif el.tag in _WRAPPERS:
            yield from _cells(el, tag)


def _para_text(el: Any) -> str:
    """A paragraph's text: its runs, also inside hyperlinks, fields and tracked
    insertions; not deleted text, nor text boxes and drawings.  Hidden text (``w:vanish``
    on the run) is read, marked ``[hidden text: ...]``."""
    pieces: list[tuple[bool, str]] = []
    _runs(el, pieces)
    parts: list[str] = []
    for hidden, group in itertools.groupby(pieces, key=lambda p: p[0]):
        text = "".join(t for _, t in group)
        if hidden and text.strip():
            parts.append(f"[hidden text: {text.strip()}]")
        elif not hidden:
            parts.append(text)
    return "".join(parts)


def _runs(el: Any, pieces: list[tuple[bool, str]]) -> None:
    """(hidden, text) of each run in ``el``, in order."""
    for child in el.iterchildren():
        if child.tag == _R:
            hidden = _hidden(child)
            for item in child.iterchildren():
                if item.tag == _W + "t":
                    pieces.append((hidden, item.text or ""))
                elif item.tag in _RUN_TEXT:
                    pieces.append((hidden, _RUN_TEXT[item.tag]))
        elif child.tag in _WRAPPERS:
            _runs(child, pieces)


def _hidden(run: Any) -> bool:
    """Whether the run's own properties hide it (``w:vanish``; not through a style)."""
    rpr = run.find(_W + "rPr")
    vanish = rpr.find(_W + "vanish") if rpr is not None else None
    return vanish is not None and vanish.get(_W + "val", "true") not in ("0", "false", "off")


def _table(tbl: Any, out: _Out) -> None:
    """The table's rows as ``| a | b |`` lines (a cell's paragraphs and any table in
    it on one line), empty rows (as merged cells leave them) skipped; the deadline and
    the allowance checked at each row."""
    for tr in _cells(tbl, _TR):
        if out.done():
            return
        cells = [_cell_text(tc) for tc in _cells(tr, _TC)]
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            out.line("| " + " | ".join(cells) + " |")


def _cell_text(tc: Any) -> str:
    parts: list[str] = []
    for el in _blocks(tc):
        if el.tag == _P:
            parts.append(_para_text(el))
        else:  # a table in the cell: its cells in a row
            parts.extend(_cell_text(c) for tr in _cells(el, _TR) for c in _cells(tr, _TC))
    text = " ".join(" ".join(p.split()) for p in parts if p.strip())
    return text.replace("|", "\\|")


# --- Excel --------------------------------------------------------------------------


@dataclass(slots=True)
class _Sheet:
    """What reading a sheet found: values within the caps, past them."""

    found: bool = False
    tall: bool = False  # values (or rows) after the row cap
    wide: bool = False  # values after the column cap, in the rows read


def _xlsx(data: bytes, out: _Out, limits: Limits, give_up_at: float) -> OfficeText | str:
    import openpyxl
    from openpyxl.utils import get_column_letter

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    out.start(limits.read_secs, give_up_at)  # the opening (shared strings) not counted
    last = get_column_letter(limits.max_columns)
    starts: list[tuple[int, str]] = []
    anything = damaged = False
    try:
        sheets = book.worksheets
        for number, sheet in enumerate(sheets, 1):
            if out.done():
                break
            starts.append((out.size, f"sheet {number} of {len(sheets)} ({sheet.title})"))
            hidden = "" if sheet.sheet_state == "visible" else " (hidden)"
            out.add(f"--- sheet {sheet.title}{hidden} ---")
            seen = _Sheet()
            try:
                _rows(sheet, out, limits, seen)
            except Exception as exc:  # a cell openpyxl cannot read ("nan" as a number...)
                if _failure(exc):
                    raise
                log.info("sheet not readable: %s: %s", type(exc).__name__, exc)
                out.add("[the rest of this sheet could not be read: it is damaged]")
                anything, damaged = anything or seen.found, True
                continue
            anything = anything or seen.found or seen.tall or seen.wide
            if out.stopped:
                break
            if not seen.found:
                out.add(
                    f"[no values in rows 1-{limits.max_rows}, columns A-{last}]"
                    if seen.tall or seen.wide
                    else "[no values in this sheet]"
                )
            if seen.tall:
                out.add(
                    f"[rows after {limits.max_rows} not read: at most"
                    f" {limits.max_rows} rows of a sheet are read]"
                )
            if seen.wide:
                out.add(
                    f"[columns after {last} not read: at most"
                    f" {limits.max_columns} columns of a sheet are read]"
                )
    finally:
        book.close()
    if not anything:
        return DAMAGED_XLSX if damaged else OfficeText("", "xlsx", len(sheets), stopped=out.stopped)
    return OfficeText(out.text(), "xlsx", len(sheets), tuple(starts), out.stopped)


def _rows(sheet: Any, out: _Out, limits: Limits, seen: _Sheet) -> None:
    """The sheet's rows within the caps, numbered, into ``out``; what it found beyond
    them into ``seen``."""
    _watch_width(sheet, limits, seen)
    rows = sheet.iter_rows(
        max_row=limits.max_rows + 1, max_col=limits.max_columns + 1, values_only=True
    )
    for number, row in enumerate(rows, 1):
        if out.done():
            return
        if number > limits.max_rows:
            seen.tall = any(v is not None for v in row) or (sheet.max_row or 0) > number
            return
        seen.wide = seen.wide or any(v is not None for v in row[limits.max_columns :])
        cells = [_value(v) for v in row[: limits.max_columns]]
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            seen.found = True
            out.line(f"{number}: " + " | ".join(cells))


def _watch_width(sheet: Any, limits: Limits, seen: _Sheet) -> None:
    """Has the read-only sheet note, in ``seen.wide``, a value in any column after the
    cap (rows are read only up to the cap's next column): each row's cells pass
    through its ``_get_row`` as parsed.  Without that hook (another openpyxl), only
    the cap's next column is looked at."""
    get_row = getattr(sheet, "_get_row", None)
    if get_row is None:
        return

    def watched(row: list[dict[str, Any]], *args: Any, **kw: Any) -> Any:
        if not seen.wide:
            seen.wide = any(
                c.get("column", 0) > limits.max_columns
                and c.get("row", 0) <= limits.max_rows
                and c.get("value") not in (None, "")
                for c in row
            )
        return get_row(row, *args, **kw)

    sheet._get_row = watched


def _value(v: object) -> str:
    """A cell's value as Excel would show it, more or less, on one line."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, float):
        return f"{v:.15g}"
    if isinstance(v, dt.datetime) and v.time() == dt.time():
        return v.date().isoformat()
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    return " ".join(str(v).split()).replace("|", "\\|")
