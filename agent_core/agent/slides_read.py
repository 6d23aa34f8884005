"""Reading a PowerPoint (.pptx) file, inside the reading process.

Run only in ``python -m agent_core.agent.doc_child``, through
:func:`agent_core.agent.office_read.read` (the zip's checks, the deadline, the
allowance and the reasons a file is not read are shared with Word and Excel files:
see :mod:`~agent_core.agent.office`).  python-pptx opens the package and gives the
slides in the order the presentation shows them (not the order of the files in the
zip); each slide's shapes are then walked in its XML, in the order they are stored
(PowerPoint's reading order for a screen reader): text boxes and placeholders
paragraph by paragraph, grouped shapes opened, tables row by row, a picture by its
alternative text.  The slide's speaker notes follow it.  A hidden slide is read,
marked hidden.  Left out: charts and SmartArt (their text is in parts of their own),
the footer, date and slide-number placeholders (the same on every slide).

The walk is lazy and has no recursion of its own: the deadline and the allowance are
checked before every line, so one huge slide cannot hold the process past them and
lose what was read before it.  A slide without a line gets no marker (a deck of
pictures does not use the allowance up with ``--- slide N ---`` lines), but counts
for the deadline.  A slide python-pptx cannot give (a damaged part, a relationship to
something that is not a slide) is named damaged and the next one read.  Every
function is blocking.
"""

from __future__ import annotations

import io
import logging
import zipfile
from collections.abc import Iterator
from typing import Any

from agent_core.agent.office import OfficeText
from agent_core.agent.office_read import Limits, _failure, _Out

log = logging.getLogger(__name__)

_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_NOTES_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/notesSlide"
_TITLES = frozenset({"title", "ctrTitle"})
# the same on every slide (PowerPoint's "Apply to All"): not worth the allowance
_SKIPPED = frozenset({"ftr", "dt", "sldNum", "hdr"})
MAX_TITLE_CHARS = 60  # a slide's title, where a cut note names the slide
DAMAGED_PPTX = "damaged (it could not be opened as a presentation)"


def pptx_text(data: bytes, out: _Out, limits: Limits, give_up_at: float) -> OfficeText | str:
    """The slides' text into ``out``, a ``--- slide N ---`` line before each slide that
    has any, within the deadline and the allowance, checked before every line."""
    import pptx

    try:
        deck = pptx.Presentation(io.BytesIO(data))
        root = deck.element  # python-pptx's own parse of ppt/presentation.xml
        if root.tag != _P + "presentation":
            raise ValueError(f"the presentation part is a {root.tag}")
        # the show order, read here: python-pptx's deck.slides gives up on the whole
        # deck when one entry names a missing part
        listed = root.find(_P + "sldIdLst")
        ids = [] if listed is None else [el.get(_R_ID) for el in listed.iterchildren(_P + "sldId")]
    except Exception as exc:  # python-pptx parses every part it can reach when opening
        if _failure(exc) or not _names_a_presentation(data):
            raise
        log.info("pptx not opened: %s: %s", type(exc).__name__, exc)
        return DAMAGED_PPTX
    out.start(limits.read_secs, give_up_at)
    total = len(ids)
    starts: list[tuple[int, str]] = []
    seen: set[int] = set()  # slide parts already read (a list naming one twice)
    for number, rid in enumerate(ids, 1):
        if out.done():
            break
        try:
            slide = deck.part.related_part(rid).slide  # type: ignore[attr-defined]
        except Exception as exc:  # the list names a part that is missing, or no slide
            _damaged(exc, number, total, out, starts, marked=False)
            continue
        if id(slide.part) not in seen:
            seen.add(id(slide.part))
            _slide(slide, number, total, out, starts)
    if not starts:
        return OfficeText("", "pptx", total, stopped=out.stopped)
    return OfficeText(out.text(), "pptx", total, tuple(starts), out.stopped)


def _names_a_presentation(data: bytes) -> bool:
    """Does the zip hold a presentation's main part (so a failure to open it means a
    damaged presentation, not another kind of file)?"""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return "ppt/presentation.xml" in z.namelist()
    except (zipfile.BadZipFile, ValueError, EOFError, OSError):
        return False


def _slide(slide: Any, number: int, total: int, out: _Out, starts: list[tuple[int, str]]) -> None:
    """One slide's lines, then its notes' lines, into ``out``; its marker (and its
    entry in ``starts``) before the first of them, named by its title once known.  A
    slide that fails part way keeps what was read of it, then is named damaged."""
    label = f"slide {number} of {total}"
    marked = titled = False
    try:
        hidden = " (hidden)" if slide.element.get("show") in ("0", "false") else ""
        lines = _shape_lines(slide.element.find(f"{_P}cSld/{_P}spTree"))
        notes = ((False, f"Notes: {line}") for line in _notes_lines(slide))
        for item in _chain(lines, notes):
            if out.done():
                return
            if item is None:  # an element without a line: only the clock looked at
                continue
            is_title, line = item
            if not marked:
                starts.append((out.size, label))
                out.add(f"--- slide {number}{hidden} ---")
                marked = True
            if is_title and not titled:
                starts[-1] = (starts[-1][0], f"{label} ({_short(line[2:])})")
                titled = True
            out.line(line)
    except Exception as exc:
        _damaged(exc, number, total, out, starts, marked=marked)
        return
    if not marked:
        out.passed()


def _damaged(
    exc: Exception,
    number: int,
    total: int,
    out: _Out,
    starts: list[tuple[int, str]],
    *,
    marked: bool,
) -> None:
    """Slide ``number`` could not be read (further): say so, unless the reason is a
    limit of the whole reading (memory, libxml2's), which ends it."""
    if _failure(exc):
        raise exc
    log.info("slide %d not readable: %s: %s", number, type(exc).__name__, exc)
    if not marked:
        starts.append((out.size, f"slide {number} of {total}"))
        out.add(f"--- slide {number} ---")
    out.line("[this slide could not be read: it is damaged]")


def _chain(*its: Iterator[tuple[bool, str] | None]) -> Iterator[tuple[bool, str] | None]:
    for it in its:
        yield from it


def _short(title: str) -> str:
    title = " ".join(title.split())
    return title if len(title) <= MAX_TITLE_CHARS else title[: MAX_TITLE_CHARS - 1] + "…"


class _Frame:
    """A level of the walk: the elements left to look at; for an alternative
    content's choice, its fallback (read if the choice gave no line and held no
    chart or diagram), the lines given when it began and whether it held one."""

    __slots__ = ("children", "fallback", "given", "graphic")

    def __init__(self, children: Iterator[Any], fallback: Any = None, given: int = 0) -> None:
        self.children = children
        self.fallback = fallback
        self.given = given
        self.graphic = False


def _shape_lines(tree: Any) -> Iterator[tuple[bool, str] | None]:
    """(is the title, line) for the shapes under ``tree`` (a slide's shape tree), in
    order, and None after each element that gave none (so the reader can look at the
    clock); groups and alternative content are opened with a stack, not recursion.

    Alternative content (``mc:AlternateContent``) is read from its choice; from its
    fallback only when the choice gave no line and held no chart or diagram (a
    newer chart's fallback is a notice that the chart cannot be shown, an
    equation's a picture of it, perhaps with its text)."""
    if tree is None:
        return
    stack = [_Frame(tree.iterchildren())]
    given = 0
    while stack:
        top = stack[-1]
        el = next(top.children, None)
        if el is None:
            stack.pop()
            if top.fallback is not None and given == top.given and not top.graphic:
                stack.append(_Frame(top.fallback.iterchildren()))
            elif top.graphic and stack:
                stack[-1].graphic = True
            continue
        before = given
        tag = el.tag
        if tag == _P + "sp":
            for line in _text_shape(el):
                given += 1
                yield line
        elif tag == _P + "grpSp":
            stack.append(_Frame(el.iterchildren(), given=given))
        elif tag == _P + "graphicFrame":
            top.graphic = True
            for tbl in el.iterfind(f"{_A}graphic/{_A}graphicData/{_A}tbl"):
                for row in _table(tbl):
                    given += 1
                    yield False, row
        elif tag == _P + "pic":
            alt = el.find(f"{_P}nvPicPr/{_P}cNvPr")
            descr = " ".join((alt.get("descr") or "").split()) if alt is not None else ""
            if descr:
                given += 1
                yield False, f"[picture: {descr}]"
        elif tag == _MC + "AlternateContent":
            choice, fallback = el.find(_MC + "Choice"), el.find(_MC + "Fallback")
            if choice is not None:
                stack.append(_Frame(choice.iterchildren(), fallback, given))
            elif fallback is not None:
                stack.append(_Frame(fallback.iterchildren()))
        if given == before:
            yield None


def _text_shape(sp: Any) -> Iterator[tuple[bool, str]]:
    body = sp.find(_P + "txBody")
    if body is None:
        return
    ph = sp.find(f"{_P}nvSpPr/{_P}nvPr/{_P}ph")
    kind = ph.get("type") if ph is not None else None
    if kind in _SKIPPED:
        return
    if kind in _TITLES:
        title = " ".join(" ".join(t.split()) for t in _paragraphs(body))
        if title:
            yield True, "# " + title
        return
    for text in _paragraphs(body):
        yield False, text


def _paragraphs(body: Any) -> Iterator[str]:
    """A text body's non-empty paragraphs: runs, fields (a date) and line breaks."""
    for p in body.iterchildren(_A + "p"):
        parts: list[str] = []
        for child in p.iterchildren():
            if child.tag in (_A + "r", _A + "fld"):
                t = child.find(_A + "t")
                if t is not None and t.text:
                    parts.append(t.text)
            elif child.tag == _A + "br":
                parts.append("\n")
        text = "".join(parts).strip()
        if text:
            yield text


def _table(tbl: Any) -> Iterator[str]:
    """A table's rows as ``| a | b |`` lines, empty rows skipped."""
    for tr in tbl.iterchildren(_A + "tr"):
        cells = []
        for tc in tr.iterchildren(_A + "tc"):
            body = tc.find(_A + "txBody")
            paras = _paragraphs(body) if body is not None else iter(())
            cells.append(" ".join(" ".join(p.split()) for p in paras).replace("|", "\\|"))
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            yield "| " + " | ".join(cells) + " |"


def _notes_lines(slide: Any) -> Iterator[str]:
    """The speaker notes' paragraphs: the body placeholder of the notes page the slide
    relates to (not its slide image, number or header), read from its XML."""
    part = next(
        (
            rel.target_part
            for rel in slide.part.rels.values()
            if rel.reltype == _NOTES_REL and not rel.is_external
        ),
        None,
    )
    # a relationship to a part of another kind: no notes
    tree = getattr(getattr(part, "notes_slide", None), "element", None)
    if tree is None:
        return
    for sp in tree.iterfind(f"{_P}cSld/{_P}spTree/{_P}sp"):
        ph = sp.find(f"{_P}nvSpPr/{_P}nvPr/{_P}ph")
        body = sp.find(_P + "txBody")
        if ph is not None and ph.get("type") == "body" and body is not None:
            yield from _paragraphs(body)
