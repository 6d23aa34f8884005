"""Word and Excel files read to the model (agent_core/agent/office.py, through
documents.read_texts)."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

from agent_core.agent import office
from agent_core.agent.documents import MAX_TEXT_TOKENS, Room, is_text, read_texts
from agent_core.agent.download_budget import DownloadBudget
from agent_core.agent.office import is_office, kind_of
from agent_core.agent.pdfs import TOO_LATE, is_pdf
from agent_core.errors import SendFailed
from agent_core.events import Attachment
from tests.fakes.office import (
    DOCX,
    OLE,
    XLSX,
    cache_value,
    declare_dimension,
    make_docx,
    make_xlsx,
    report_docx,
    under_declared,
    zip_bomb,
    zip_of,
)
from tests.fakes.pdf import make_pdf

LIMIT = 10_000_000  # MAX_ATTACHMENT_BYTES's default


class Files:
    """Downloads from a dict, remembering the cap each was asked with."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.asked: dict[str, int] = {}

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        self.asked[attachment.ref] = max_bytes
        data = self.files[attachment.ref]
        if len(data) > max_bytes:
            raise SendFailed(f"file is larger than {max_bytes} bytes")
        return data


def att(name: str, ref: str, mime: str = "") -> Attachment:
    if not mime:
        mime = DOCX if name.endswith(".docx") else XLSX if name.endswith(".xlsx") else ""
    return Attachment("document", name, mime, 0, ref)


async def read(
    files: dict[str, bytes], atts: list[Attachment], room: Room | None = None, **kw: Any
) -> tuple[list[str], list[str]]:
    return await read_texts(
        Files(files), atts, "t", room or Room(MAX_TEXT_TOKENS), DownloadBudget(0), pdf_limit=LIMIT
    )


@pytest.mark.parametrize(
    ("name", "mime", "expected"),
    [
        ("report.docx", DOCX, "word"),
        ("report", f"{DOCX}; charset=binary", "word"),
        ("data.xlsx", XLSX, "excel"),
        ("report.DOCX", "", "word"),  # Discord may give no type: the extension decides
        ("data.xlsx", "application/octet-stream", "excel"),
        ("report.docx", "application/zip", "word"),
        ("data.xlsx", "application/vnd.ms-excel", "excel"),  # an old type on a new file
        ("notes.txt", DOCX, "word"),  # the type wins
        ("report.docx", "text/plain", None),  # read as text, unless its bytes are a zip
        ("report.doc", "application/msword", None),  # the old formats stay described
        ("data.xls", "application/vnd.ms-excel", None),
        (
            "deck.pptx",
            "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            None,
        ),
        ("deck.pptx", "", None),
        ("archive.zip", "application/zip", None),
    ],
)
def test_what_counts_as_a_word_or_excel_file(name: str, mime: str, expected: str | None) -> None:
    a = Attachment("document", name, mime, 10, "r")
    assert kind_of(a) == expected and is_office(a) is (expected is not None)
    if expected:
        assert not is_text(a) and not is_pdf(a)  # never two


async def test_a_word_file_is_read_in_document_order() -> None:
    files = Files({"r": report_docx()})
    blocks, missing = await read_texts(
        files, [att("report.docx", "r")], "t", Room(MAX_TEXT_TOKENS), DownloadBudget(0),
        pdf_limit=LIMIT,
    )  # fmt: skip
    assert missing == []
    assert blocks == [
        "--- report.docx (Word document) ---\n"
        "# Quarterly report\n"
        "Revenue grew in every region.\n"
        "# Figures\n"
        "Region | Sales\n"  # the header cell spanning two columns, once
        "North | 10 | 12\n"
        "South |  | 7\n"
        "## Risks\n"
        "- Costs may rise.\n"
        "--- end of report.docx ---"
    ]
    assert files.asked == {"r": LIMIT}  # up to MAX_ATTACHMENT_BYTES, like a PDF


async def test_a_workbook_is_read_sheet_by_sheet_as_csv() -> None:
    """Cells with commas or line breaks are quoted; empty rows and trailing empty cells
    are left out; a formula gives the value Excel saved with it, and nothing when the
    file has none (files written by scripts, like this one by openpyxl)."""
    data = make_xlsx(
        {
            "Sales": [
                ["Region", "Amount", "Double", "Total"],
                ["North, East", 1200, "=B2*2", None],
                [None, None, None],
                ['South "S"', 0.1 + 0.2, "=B4*2", "=SUM(B2:B4)"],
                [True, None, None, None, None],
                [datetime.date(2024, 3, 1), datetime.datetime(2024, 3, 1, 9, 30), 1e20],
            ],
            "Notes": [[], [None, "two\nlines"]],
            "Empty": [],
        }
    )
    data = cache_value(data, 1, "C4", "0.6")  # saved by Excel: a result with the formula
    blocks, missing = await read({"x": data}, [att("figures.xlsx", "x")])
    assert missing == []
    assert blocks == [
        "--- figures.xlsx (Excel workbook, 3 sheets) ---\n"
        "--- sheet Sales ---\n"
        "Region,Amount,Double,Total\n"
        '"North, East",1200\n'  # the formula with no saved result: an empty cell
        '"South ""S""",0.3,0.6\n'
        "TRUE\n"
        "2024-03-01,2024-03-01 09:30:00,1e+20\n"
        "--- sheet Notes ---\n"
        ',"two\nlines"\n'
        "--- sheet Empty ---\n"
        "[empty]\n"
        "--- end of figures.xlsx ---"
    ]
    assert "=B2" not in blocks[0] and "SUM" not in blocks[0]  # never the formulas


async def test_the_size_a_sheet_declares_is_not_trusted() -> None:
    """A sheet claiming to be one cell (some writers get it wrong) is read whole."""
    data = declare_dimension(make_xlsx({"S": [["a", "b"], [1, 2], [3, 4]]}), 1, "A1")
    blocks, missing = await read({"d": data}, [att("dim.xlsx", "d")])
    assert missing == []
    assert blocks == [
        "--- dim.xlsx (Excel workbook, 1 sheet) ---\n--- sheet S ---\na,b\n1,2\n3,4\n--- end of dim.xlsx ---"
    ]


async def test_the_parts_decide_over_the_label() -> None:
    """A workbook labelled as a Word file is read as the workbook it is; a .docx
    labelled as text is read as Word, not shown as zip bytes."""
    blocks, missing = await read(
        {"a": make_xlsx({"S": [["x", 1]]}), "b": make_docx(["Hello"]), "c": zip_of({"a": b"1"})},
        [
            att("wrong.docx", "a"),
            att("notes.txt", "b", "text/plain"),
            att("logs.txt", "c", "text/plain"),
        ],
    )
    assert blocks == [
        "--- wrong.docx (Excel workbook, 1 sheet) ---\n--- sheet S ---\nx,1\n--- end of wrong.docx ---",
        "--- notes.txt (Word document) ---\nHello\n--- end of notes.txt ---",
    ]
    assert missing == ["logs.txt: a zip file, but not a Word or Excel file"]


@pytest.mark.parametrize(
    "data",
    [b"just some notes\n", b"PK\x03\x04 not really a zip", b"", make_docx(["x"])[:300]],
)
async def test_garbage_labelled_as_office_is_not_readable(data: bytes) -> None:
    blocks, missing = await read({"g": data, "h": data}, [att("a.docx", "g"), att("b.xlsx", "h")])
    assert blocks == []
    assert missing == [
        "a.docx: not readable as a Word file",
        "b.xlsx: not readable as an Excel file",
    ]


async def test_a_zip_without_the_parts_is_not_readable() -> None:
    data = zip_of({"word/other.xml": b"<x/>", "readme.txt": b"hi"})
    blocks, missing = await read({"z": data}, [att("a.docx", "z")])
    assert blocks == [] and missing == ["a.docx: not readable as a Word file"]


async def test_an_encrypted_or_old_file_is_named_so() -> None:
    """Password-protected Office files are OLE containers, like .doc and .xls."""
    ole = OLE + bytes(504)
    blocks, missing = await read({"w": ole, "x": ole}, [att("plan.docx", "w"), att("q.xlsx", "x")])
    assert blocks == []
    assert missing == [
        "plan.docx: password-protected, or an old .doc file rather than a .docx (not read)",
        "q.xlsx: password-protected, or an old .xls file rather than a .xlsx (not read)",
    ]


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return zip_bomb(size=60_000_000)  # 60 MB of zeros, about 60 kB packed


async def test_a_zip_bomb_is_refused_before_a_library_sees_it(
    bomb: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(bomb) < 100_000

    def never(*args: object, **kw: object) -> None:
        raise AssertionError("the library was given the bomb")

    monkeypatch.setattr(office.docx, "Document", never)
    monkeypatch.setattr(office, "ExcelReader", never)
    xl = zip_bomb("xl/workbook.xml", 51_000_000)
    blocks, missing = await read({"b": bomb, "x": xl}, [att("cv.docx", "b"), att("t.xlsx", "x")])
    assert blocks == []
    assert missing == [
        "cv.docx: too large once unpacked (over 50 MB)",
        "t.xlsx: too large once unpacked (over 50 MB)",
    ]
    many = zip_of({f"word/media/{n}.png": b"" for n in range(2_001)})
    got = office.read(many, "word", 1000, time.monotonic() + 30)
    assert got == "too many parts in it (over 2,000)"


async def test_a_word_file_may_hold_10_mb_of_xml_and_more_in_pictures() -> None:
    """python-docx builds each XML part whole (7-20 times its size): more than 10 MB
    of it is refused, whatever the parts are named; pictures do not count."""
    src = make_docx(["Caption"])
    members = office.zipfile.ZipFile(office.io.BytesIO(src))
    parts = {i.filename: members.read(i) for i in members.infolist()}
    picture = b"\x89PNG\r\n\x1a\n" + bytes(12_000_000)  # packs small, unpacks past 10 MB
    with_picture = zip_of({**parts, "word/media/image1.png": picture})
    blocks, missing = await read({"p": with_picture}, [att("photo.docx", "p")])
    assert missing == [] and blocks[0].startswith("--- photo.docx (Word document) ---\nCaption")
    markup = {**parts, "word/media/image1.png": b"  <w:p/>" * 1_300_000}  # 10.4 MB
    blocks, missing = await read({"m": zip_of(markup)}, [att("big.docx", "m")])
    assert missing == ["big.docx: too large once unpacked (over 10 MB of text)"]


async def test_a_part_that_unpacks_past_its_declared_size_is_not_read() -> None:
    """zipfile never gives more than a member's declared size: a zip that lies about
    it fails its CRC check instead of unpacking 20 MB."""
    data = under_declared(report_docx(), "word/document.xml", 5_000)
    blocks, missing = await read({"l": data}, [att("liar.docx", "l")])
    assert blocks == [] and missing == ["liar.docx: not readable as a Word file"]


async def test_openpyxl_reads_through_a_meter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row openpyxl would have to read more than MAX_ROW_BYTES for (it builds a row
    whole) ends that sheet's reading, the next sheet read; a part over MAX_PART_BYTES
    while the workbook opens refuses it."""
    wide = [f"cell {n}" for n in range(3_000)]  # about 100 kB of XML
    data = make_xlsx({"Wide": [["head"], wide, ["after"]], "Next": [["ok"]]})
    monkeypatch.setattr(office, "MAX_ROW_BYTES", 40_000)  # openpyxl reads 16 kB at a time
    blocks, missing = await read({"w": data}, [att("wide.xlsx", "w")])
    assert missing == []
    assert blocks == [
        "--- wide.xlsx (Excel workbook, 2 sheets) ---\n"
        "--- sheet Wide ---\n"
        "head\n"
        "[... the rest of this sheet is not read: a row too large to read]\n"
        "--- sheet Next ---\n"
        "ok\n"
        "--- end of wide.xlsx ---"
    ]
    monkeypatch.setattr(office, "MAX_PART_BYTES", 2_000)
    blocks, missing = await read({"w": data}, [att("wide.xlsx", "w")])
    assert blocks == [] and missing == ["wide.xlsx: too large once unpacked (a part over 10 MB)"]


async def test_a_workbook_s_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(office, "MAX_SHEET_ROWS", 2)
    monkeypatch.setattr(office, "MAX_COLUMNS", 3)
    rows: list[list[object]] = [[1, 2, 3, 4], [5], [None], [6], [7]]
    blocks, _ = await read({"c": make_xlsx({"A": rows, "B": [[8]]})}, [att("caps.xlsx", "c")])
    assert blocks == [
        "--- caps.xlsx (Excel workbook, 2 sheets) ---\n"
        "--- sheet A ---\n1,2,3\n5\n"
        "[... at most 2 rows of a sheet are read]\n"
        "[... columns after the 3th are not read]\n"
        "--- sheet B ---\n8\n"
        "--- end of caps.xlsx ---"
    ]
    monkeypatch.setattr(office, "MAX_ROWS", 3)  # rows looked at, empty ones too
    blocks, _ = await read({"c": make_xlsx({"A": rows, "B": [[8]]})}, [att("caps.xlsx", "c")])
    assert blocks[0].endswith(
        "--- sheet A ---\n1,2,3\n5\n[... columns after the 3th are not read]\n"
        "[... reading stopped in sheet A, row 3: at most 3 rows of a workbook are looked at;"
        " sheets not read: B]\n--- end of caps.xlsx ---"
    )


async def test_a_word_file_and_a_pdf_share_the_turn_s_allowance() -> None:
    """In the order posted: the Word file whole, the PDF cut in its page 2; then a
    PDF first and a long Word file cut, the model told how far it got."""
    paragraphs = [" ".join(f"p{n}w{i}" for i in range(20)) for n in range(1, 41)]  # ~26 tokens
    pages = [" ".join(f"s{n}w{i}" for i in range(40)) for n in range(1, 11)]  # ~52 tokens
    files = {"d": make_docx(paragraphs[:4]), "p": make_pdf(pages), "long": make_docx(paragraphs)}
    room = Room(200)
    blocks, missing = await read(
        files, [att("memo.docx", "d"), att("spec.pdf", "p", "application/pdf")], room
    )
    assert missing == [] and room.tokens == 0
    assert blocks[0] == "--- memo.docx (Word document) ---\n" + "\n".join(paragraphs[:4]) + (
        "\n--- end of memo.docx ---"
    )
    assert blocks[1].startswith("--- spec.pdf (PDF, 10 pages) ---\n--- page 1 ---\ns1w0")
    assert blocks[1].endswith(
        "\n[... cut here, in page 2 of 10: no room for the rest]\n--- end of spec.pdf ---"
    )

    room = Room(200)
    blocks, missing = await read(
        files, [att("spec.pdf", "p", "application/pdf"), att("long.docx", "long")], room
    )
    assert blocks[0].endswith(
        "[... cut here, in page 4 of 10: no room for the rest]\n--- end of spec.pdf ---"
    )
    assert missing == ["long.docx: not read, earlier files already fill the space"]

    room = Room(300)
    blocks, missing = await read(files, [att("long.docx", "long")], room)
    body = blocks[0]
    assert body.startswith("--- long.docx (Word document) ---\np1w0 p1w1")
    assert "p11w0" in body and "p13w0" not in body
    assert body.endswith(
        "\n[... cut here, about 25% of the way through the document: no room for the rest]"
        "\n--- end of long.docx ---"
    )
    # reading itself stopped at the allowance: 40 paragraphs were not all read
    got = office.read(files["long"], "word", 100, time.monotonic() + 30)
    assert isinstance(got, office.WordText) and got.stopped == "allowance" and got.at == 3


async def test_a_workbook_cut_by_the_allowance_names_what_is_left() -> None:
    rows: list[list[object]] = [[f"r{n}", n, n * 2, "some words here"] for n in range(1, 200)]
    data = make_xlsx({"Sales": rows, "Costs": [["x"]], "Notes": [["y"]]})
    blocks, _ = await read({"x": data}, [att("book.xlsx", "x")], Room(100))
    assert blocks[0].startswith(
        "--- book.xlsx (Excel workbook, 3 sheets) ---\n--- sheet Sales ---\nr1,1,2,"
    )
    assert blocks[0].endswith(
        ": no room for the rest; sheets not read: Costs, Notes]\n--- end of book.xlsx ---"
    )
    assert "[... cut here, in sheet Sales, row " in blocks[0]


async def test_the_deadline_is_checked_between_paragraphs_and_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading stops at its deadline (here: at once), the first line always read."""
    monkeypatch.setattr(office, "READ_SECS", 0.0)
    files = {
        "d": make_docx(["one", "two", "three", "four"]),
        "x": make_xlsx({"A": [["a1"], ["a2"]], "B": [["b1"]]}),
    }
    blocks, missing = await read(files, [att("slow.docx", "d"), att("slow.xlsx", "x")])
    assert missing == []
    assert blocks == [
        "--- slow.docx (Word document) ---\none\n"
        "[... reading stopped about 25% of the way through: reading it took too long]\n"
        "--- end of slow.docx ---",
        "--- slow.xlsx (Excel workbook, 2 sheets) ---\n--- sheet A ---\na1\n"
        "[... reading stopped in sheet A, row 1: reading it took too long; sheets not read: B]\n"
        "--- end of slow.xlsx ---",
    ]
    # a job that starts after the message gave up reads nothing
    assert office.read(files["d"], "word", 1000, time.monotonic() - 1) == TOO_LATE


async def test_an_office_file_larger_than_the_cap_is_not_downloaded() -> None:
    files = Files({"big": make_docx(["big"])})
    big = Attachment("document", "big.docx", DOCX, LIMIT + 1, "big")
    blocks, missing = await read_texts(
        files, [big], "t", Room(MAX_TEXT_TOKENS), DownloadBudget(0), pdf_limit=LIMIT
    )
    assert blocks == [] and files.asked == {}
    assert missing == [f"big.docx: larger than {LIMIT} bytes, not read"]
