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
marked hidden.  Charts and SmartArt keep their text in parts of their own, which
are not read.  Every function is blocking.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from agent_core.agent.office import OfficeText
from agent_core.agent.office_read import Limits, _Out

_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_TITLES = frozenset({"title", "ctrTitle"})
MAX_TITLE_CHARS = 60  # a slide's title, where a cut note names the slide


def pptx_text(data: bytes, out: _Out, limits: Limits, give_up_at: float) -> OfficeText:
    """The slides' text into ``out`` (a ``--- slide N ---`` line before each), within
    the deadline and the allowance, checked before every line."""
    import pptx

    deck = pptx.Presentation(io.BytesIO(data))
    out.start(limits.read_secs, give_up_at)
    slides = list(deck.slides)
    starts: list[tuple[int, str]] = []
    anything = False
    for number, slide in enumerate(slides, 1):
        if out.done():
            break
        lines = list(_slide_lines(slide.element))
        hidden = " (hidden)" if slide.element.get("show") in ("0", "false") else ""
        title = next((line[2:] for line in lines if line.startswith("# ")), "")
        starts.append((out.size, _short(title)))
        out.add(f"--- slide {number}{hidden} ---")
        notes = _notes(slide) if slide.has_notes_slide else []
        anything = anything or bool(lines or notes)
        for line in lines:
            if out.done():
                break
            out.line(line)
        for line in notes:
            if out.done():
                break
            out.line(f"Notes: {line}")
    if not anything:
        return OfficeText("", "pptx", len(slides), stopped=out.stopped)
    return OfficeText(out.text(), "pptx", len(slides), tuple(starts), out.stopped)


def _short(title: str) -> str:
    title = " ".join(title.split())
    return title if len(title) <= MAX_TITLE_CHARS else title[: MAX_TITLE_CHARS - 1] + "…"


def _slide_lines(slide: Any) -> Iterator[str]:
    tree = slide.find(f"{_P}cSld/{_P}spTree")
    if tree is not None:
        yield from _shapes(tree)


def _shapes(parent: Any) -> Iterator[str]:
    """The lines of the shapes in ``parent`` (the slide's tree, a group), in order."""
    for el in parent.iterchildren():
        tag = el.tag
        if tag == _P + "sp":
            yield from _text_shape(el)
        elif tag == _P + "grpSp":
            yield from _shapes(el)
        elif tag == _P + "graphicFrame":
            for tbl in el.iterfind(f"{_A}graphic/{_A}graphicData/{_A}tbl"):
                yield from _table(tbl)
        elif tag == _P + "pic":
            alt = el.find(f"{_P}nvPicPr/{_P}cNvPr")
            descr = " ".join((alt.get("descr") or "").split()) if alt is not None else ""
            if descr:
                yield f"[picture: {descr}]"
        elif tag == _MC + "AlternateContent":
            # newer content with a fallback for older readers: the first choice only
            choice = el.find(_MC + "Choice")
            if choice is not None:
                yield from _shapes(choice)


def _text_shape(sp: Any) -> Iterator[str]:
    body = sp.find(_P + "txBody")
    if body is None:
        return
    paras = [t for t in (_para_text(p) for p in body.iterchildren(_A + "p")) if t]
    ph = sp.find(f"{_P}nvSpPr/{_P}nvPr/{_P}ph")
    if ph is not None and ph.get("type") in _TITLES:
        if paras:
            yield "# " + " ".join(" ".join(p.split()) for p in paras)
        return
    yield from paras


def _para_text(p: Any) -> str:
    """A paragraph's runs, fields (a date, a slide number) and line breaks."""
    parts: list[str] = []
    for child in p.iterchildren():
        if child.tag in (_A + "r", _A + "fld"):
            t = child.find(_A + "t")
            if t is not None and t.text:
                parts.append(t.text)
        elif child.tag == _A + "br":
            parts.append("\n")
    return "".join(parts).strip()


def _table(tbl: Any) -> Iterator[str]:
    """A table's rows as ``| a | b |`` lines, empty rows skipped."""
    for tr in tbl.iterchildren(_A + "tr"):
        cells = []
        for tc in tr.iterchildren(_A + "tc"):
            body = tc.find(_A + "txBody")
            paras = body.iterchildren(_A + "p") if body is not None else ()
            text = " ".join(" ".join(_para_text(p).split()) for p in paras)
            cells.append(text.strip().replace("|", "\\|"))
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            yield "| " + " | ".join(cells) + " |"


def _notes(slide: Any) -> list[str]:
    """The speaker notes' paragraphs (their body placeholder only: not the slide
    image, number or header on the notes page)."""
    ph = slide.notes_slide.notes_placeholder
    body = ph.element.find(_P + "txBody") if ph is not None else None
    if body is None:
        return []
    return [t for t in (_para_text(p) for p in body.iterchildren(_A + "p")) if t]
