"""PowerPoint files read to the model (agent_core/agent/slides_read.py, through
office_read.read in the reading process of doc_process.py, and documents.read_texts).

The end-to-end tests start the real reading process; the ones on the deadline call
office_read.read in this process with limits of their own."""

from __future__ import annotations

import time

from agent_core.agent import office, office_read
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


def deck(**kw: object) -> bytes:
    return make_pptx(DECK, **kw)  # type: ignore[arg-type]


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
            "blank": make_pptx([{}, {"title": ""}]),
        },
        [
            doc("locked.pptx", "locked", PPTX),
            doc("old.pptx", "old", PPTX),
            doc("word.pptx", "word", PPTX),
            doc("text.pptx", "text", PPTX),
            doc("broken.pptx", "broken", PPTX),
            doc("blank.pptx", "blank", PPTX),
        ],
    )
    assert blocks == []
    assert missing == [
        "locked.pptx: password-protected",
        "old.pptx: in the old PowerPoint format (.ppt), which is not read",
        "word.pptx: not a PowerPoint presentation (.pptx)",
        "text.pptx: not a PowerPoint presentation (.pptx)",
        "broken.pptx: not a PowerPoint presentation (.pptx)",
        f"blank.pptx: {office.NO_TEXT}",
    ]
