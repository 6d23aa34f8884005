"""PowerPoint files read to the model (agent_core/agent/slides_read.py, through
office_read.read in the reading process of doc_process.py, and documents.read_texts).

The end-to-end tests start the real reading process; the ones on the deadline call
office_read.read in this process with limits of their own."""

from __future__ import annotations

import asyncio
import io
import time
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest

from agent_core.agent import office, office_read, slides_read
from agent_core.agent.documents import Room
from agent_core.agent.office import OfficeText
from tests.fakes.office import PPTX, encrypted_office, make_docx, make_pptx, replaced
from tests.unit.agent.test_office import doc, read

DECK = [
    {
        "title": "Quarterly review",
        "body": ["Revenue up 12%", "Costs flat"],
        "notes": "Mention the new office",
    },
    {"title": "Numbers", "table": [["Region", "Q3", ""], ["EU", "4|1", ""], ["", "", ""]]},
    {"group": ["left box", "right box"], "picture": "A chart of  revenue\nby month"},
    {"title": "Backup", "body": ["old data"], "hidden": True},
]


LIMITS = office_read.Limits(15.0, 10**8, 10_000, 25_000_000, 2_000, 50)
P_NS = 'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"'
A_NS = 'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"'
MC_NS = 'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"'


def deck(**kw: object) -> bytes:
    return make_pptx(DECK, **kw)  # type: ignore[arg-type]


def text_shape(text: str, ph: str = "") -> str:
    """A ``p:sp`` holding ``text`` (a placeholder of type ``ph`` if given)."""
    nv = f'<p:ph type="{ph}"/>' if ph else ""
    run = f"<a:r><a:t>{text}</a:t></a:r>" if text else ""
    return (
        f'<p:sp {P_NS} {A_NS}><p:nvSpPr><p:cNvPr id="90" name="x"/><p:cNvSpPr/>'
        f"<p:nvPr>{nv}</p:nvPr></p:nvSpPr><p:spPr/><p:txBody><a:bodyPr/>"
        f"<a:p>{run}</a:p></p:txBody></p:sp>"
    )


def with_shapes(data: bytes, slide: int, xml: str) -> bytes:
    """``data`` with ``xml`` (shapes) at the end of slide ``slide``'s shape tree."""
    name = f"ppt/slides/slide{slide}.xml"
    old = zipfile.ZipFile(io.BytesIO(data)).read(name)
    return replaced(data, {name: old.replace(b"</p:spTree>", xml.encode() + b"</p:spTree>")})


async def test_a_presentation_is_read_slide_by_slide_in_the_order_it_is_shown() -> None:
    """Shown 1, 3, 2, 4 (the files in the zip stay slide1..slide4): titles, bullets,
    a table (its empty row and column dropped), grouped text boxes, a picture by its
    alternative text, the speaker notes after their slide, a hidden slide marked."""
    blocks, missing = await read({"p": deck(order=[0, 2, 1, 3])}, [doc("review.pptx", "p", PPTX)])
    assert missing == []
    assert blocks == [
        "--- review.pptx (PowerPoint presentation, 4 slides) ---\n"
        "--- slide 1 ---\n"
        "# Quarterly review\n"
        "Revenue up 12%\n"
        "Costs flat\n"
        "Notes: Mention the new office\n"
        "--- slide 2 ---\n"
        "left box\n"
        "right box\n"
        "[picture: A chart of revenue by month]\n"
        "--- slide 3 ---\n"
        "# Numbers\n"
        "| Region | Q3 |\n"
        "| EU | 4\\|1 |\n"
        "--- slide 4 (hidden) ---\n"
        "# Backup\n"
        "old data\n"
        "--- end of review.pptx ---"
    ]


async def test_the_allowance_cuts_a_long_deck_and_names_the_slide() -> None:
    slides = [
        {"title": f"Part {i}", "body": [f"point {i}.{j} " * 8 for j in range(5)]} for i in range(40)
    ]
    blocks, missing = await read({"p": make_pptx(slides)}, [doc("long.pptx", "p", PPTX)], Room(600))  # type: ignore[arg-type]
    assert missing == []
    [block] = blocks
    assert block.startswith(
        "--- long.pptx (PowerPoint presentation, 40 slides) ---\n--- slide 1 ---"
    )
    note = block.rsplit("\n", 2)[-2]
    assert note.startswith("[... ") and "of 40 (Part " in note, note
    assert "--- slide 40 ---" not in block


def test_the_deadline_is_checked_at_each_line() -> None:
    """No second line once the reading's seconds are up: the first line is always read,
    then the text says where and why it stopped."""
    limits = office_read.Limits(0.0, 10**8, 10_000, 25_000_000, 2_000, 50)
    got = office_read.read("pptx", deck(), 10_000, time.monotonic() + 30, limits)
    assert isinstance(got, OfficeText)
    assert got.text == "--- slide 1 ---\n# Quarterly review"
    assert got.stopped == "time"
    assert got.note(len(got.text)) == (
        "[... not read to the end, in slide 1 of 4 (Quarterly review): reading it took too long]"
    )


async def test_presentations_that_cannot_be_read_say_why() -> None:
    old = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(2048)  # an OLE file: a .ppt
    no_presentation = replaced(deck(), {"ppt/presentation.xml": b"<not-a-presentation/>"})
    blocks, missing = await read(
        {
            "locked": encrypted_office(),
            "old": old,
            "word": make_docx(["a Word file, called a pptx"]),
            "text": b"just text",
            "broken": no_presentation,
            "zip": replaced(make_docx(["x"]), {}, {"ppt/presentation.xml": b"<p/>"}),
            "blank": make_pptx([{}, {"title": ""}]),
        },
        [
            doc("locked.pptx", "locked", PPTX),
            doc("old.pptx", "old", PPTX),
            doc("word.pptx", "word", PPTX),
            doc("text.pptx", "text", PPTX),
            doc("broken.pptx", "broken", PPTX),
            doc("zip.pptx", "zip", PPTX),
            doc("blank.pptx", "blank", PPTX),
        ],
    )
    assert blocks == []
    assert missing == [
        "locked.pptx: password-protected",
        "old.pptx: in the old PowerPoint format (.ppt), which is not read",
        "word.pptx: not a PowerPoint presentation (.pptx)",
        "text.pptx: not a PowerPoint presentation (.pptx)",
        f"broken.pptx: {slides_read.DAMAGED_PPTX}",
        f"zip.pptx: {slides_read.DAMAGED_PPTX}",
        f"blank.pptx: {office.NO_TEXT}",
    ]


def test_a_huge_slide_is_read_only_as_far_as_the_allowance_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The allowance (and the deadline) are checked before each line as the slide is
    walked, not after the whole slide was: a slide of 20,000 paragraphs read into 300
    tokens looks at a few hundred of them."""
    seen = 0
    walk = slides_read._paragraphs

    def counted(body: Any) -> Iterator[str]:
        nonlocal seen
        for text in walk(body):
            seen += 1
            yield text

    monkeypatch.setattr(slides_read, "_paragraphs", counted)
    data = make_pptx(
        [{"title": "One", "body": ["alpha"]}, {"body": [f"line {i}" for i in range(20_000)]}]
    )
    got = office_read.read("pptx", data, 300, time.monotonic() + 30, LIMITS)
    assert isinstance(got, OfficeText) and got.stopped == "allowance"
    assert got.text.startswith("--- slide 1 ---\n# One\nalpha\n--- slide 2 ---\nline 0\n")
    assert seen < 500


def test_empty_slides_leave_the_allowance_to_the_text() -> None:
    """130 slides with nothing to read (pictures without alternative text), then one
    with text, into 600 tokens: the text is read, numbered as shown."""
    slides: list[dict[str, object]] = [{} for _ in range(130)] + [
        {"title": "At last", "body": ["found"]}
    ]
    got = office_read.read("pptx", make_pptx(slides), 600, time.monotonic() + 30, LIMITS)
    assert isinstance(got, OfficeText)
    assert got.text == "--- slide 131 ---\n# At last\nfound"
    assert got.title == "PowerPoint presentation, 131 slides"


def test_footers_are_left_out_and_a_fallback_is_read_when_the_choice_says_nothing() -> None:
    """Footer, date and slide-number placeholders repeat on every slide: not read.  A
    text box whose newer form (an equation) holds no text is read from its fallback;
    a "# " in body text is not taken for the slide's title."""
    extra = (
        text_shape("ACME Confidential", "ftr")
        + text_shape("11/24/2026", "dt")
        + text_shape("2", "sldNum")
        + f'<mc:AlternateContent {MC_NS}><mc:Choice Requires="a14">{text_shape("")}'
        + f"</mc:Choice><mc:Fallback>{text_shape('E=mc2 (picture)')}</mc:Fallback>"
        + "</mc:AlternateContent>"
    )
    data = make_pptx([{"group": ["# 1 priority: hiring"]}, {"title": "Plan"}])
    data = with_shapes(with_shapes(data, 1, extra), 2, text_shape("Energy"))
    got = office_read.read("pptx", data, 10_000, time.monotonic() + 30, LIMITS)
    assert isinstance(got, OfficeText)
    assert got.text == (
        "--- slide 1 ---\n# 1 priority: hiring\nE=mc2 (picture)\n--- slide 2 ---\n# Plan\nEnergy"
    )
    assert got.starts == (
        (0, "slide 1 of 2"),
        (got.text.index("--- slide 2"), "slide 2 of 2 (Plan)"),
    )


def test_a_damaged_slide_is_named_and_the_others_read() -> None:
    """The slide list names a part that is not there: that slide is named damaged,
    the ones before and after it are read."""
    data = make_pptx([{"title": "First"}, {"title": "Last"}])
    z = zipfile.ZipFile(io.BytesIO(data))
    pres = z.read("ppt/presentation.xml")
    first_id = pres.index(b"<p:sldId ")
    pres = pres[:first_id] + pres[first_id:].replace(
        b"</p:sldIdLst>", b'<p:sldId id="999" r:id="rId999"/></p:sldIdLst>', 1
    )
    order = pres.split(b"<p:sldIdLst>")[1].split(b"</p:sldIdLst>")[0]
    ids = order.split(b"/>")[:-1]
    pres = pres.replace(order, ids[0] + b"/>" + ids[2] + b"/>" + ids[1] + b"/>")
    got = office_read.read(
        "pptx",
        replaced(data, {"ppt/presentation.xml": pres}),
        10_000,
        time.monotonic() + 30,
        LIMITS,
    )
    assert isinstance(got, OfficeText)
    assert got.text == (
        "--- slide 1 ---\n# First\n"
        "--- slide 2 ---\n[this slide could not be read: it is damaged]\n"
        "--- slide 3 ---\n# Last"
    )


def test_a_newer_chart_s_fallback_notice_is_not_read() -> None:
    """PowerPoint stores a newer chart (a treemap, a waterfall) as a choice holding the
    chart's frame and a fallback shape telling older versions it cannot be shown:
    the chart is left out, and so is that notice."""
    chart = (
        f'<p:graphicFrame {P_NS} {A_NS}><p:nvGraphicFramePr><p:cNvPr id="91" name="c"/>'
        "<p:cNvGraphicFramePr/><p:nvPr/></p:nvGraphicFramePr><p:xfrm/><a:graphic>"
        '<a:graphicData uri="http://schemas.microsoft.com/office/drawing/2014/chartex"/>'
        "</a:graphic></p:graphicFrame>"
    )
    notice = text_shape("This chart isn't available in your version of PowerPoint.")
    extra = (
        f'<mc:AlternateContent {MC_NS}><mc:Choice Requires="cx1">{chart}</mc:Choice>'
        f"<mc:Fallback>{notice}</mc:Fallback></mc:AlternateContent>"
    )
    data = with_shapes(make_pptx([{"title": "Sales by region"}]), 1, extra)
    got = office_read.read("pptx", data, 10_000, time.monotonic() + 30, LIMITS)
    assert isinstance(got, OfficeText)
    assert got.text == "--- slide 1 ---\n# Sales by region"


def test_the_walk_gives_the_clock_a_look_at_every_element() -> None:
    """Shapes without text give no line but a tick, at which the reader checks its
    deadline: a slide of text-less shapes cannot hold the reading past it."""
    from lxml import etree

    tree = etree.fromstring(
        f"<p:spTree {P_NS}>{text_shape('')}{text_shape('')}{text_shape('x')}</p:spTree>"
    )
    assert list(slides_read._shape_lines(tree)) == [None, None, (False, "x")]


async def test_the_reading_slots_bound_everyone_when_the_count_changes() -> None:
    """Callers asking for 1 and 2 slots on one loop: never more than 2 at once (a
    count that changes applies to those already waiting too)."""
    from agent_core.agent import doc_process

    limiter = doc_process._Limiter()
    running = peak = 0

    async def hold(capacity: int) -> None:
        nonlocal running, peak
        async with limiter.slot(capacity):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.02)
            running -= 1

    await asyncio.gather(*(hold(1 if i % 2 else 2) for i in range(8)))
    assert 1 <= peak <= 2 and limiter.held == 0
