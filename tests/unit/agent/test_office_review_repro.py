"""REVIEW REPRODUCTIONS (not product tests) for the Word/Excel reading of f7aa9fd..abd8638.

Each test is ``xfail(strict=True)``: it passes while the defect it names is there,
and turns into an XPASS failure once the defect is fixed; then drop the marker
(or the test).  Built files are tiny except the shared-strings workbook (~2.5 MB, ~5 s of a child's CPU).
"""

from __future__ import annotations

import asyncio
import io
import random
import string
import struct
import time
import zipfile

import pytest

from agent_core.agent import documents, office, office_read
from agent_core.agent.documents import MAX_TEXT_TOKENS, Room, read_texts
from agent_core.agent.download_budget import DownloadBudget
from agent_core.events import Attachment
from tests.fakes.office import DOCX, XLSX, make_docx, make_xlsx
from tests.unit.agent.test_pdfs import LIMIT, Files

LIMITS = office_read.Limits(15.0, 10**8, 10_000, 200, 10**6, 2_000, 50)
W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
SST_CT = (
    b'<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
    b'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
)


def _replace(base: bytes, repl: dict[str, bytes], add: dict[str, bytes] | None = None) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(base))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info.filename, repl.get(info.filename, src.read(info)))
        for name, data in (add or {}).items():
            z.writestr(name, data)
    return out.getvalue()


def _docx(body: str) -> bytes:
    xml = f'<?xml version="1.0" encoding="UTF-8"?><w:document {W}><w:body>{body}</w:body></w:document>'
    return _replace(make_docx(["x"]), {"word/document.xml": xml.encode()})


def _xlsx(rows: str, dim: str = "A1", sst: bytes | None = None) -> bytes:
    sheet = (
        '<?xml version="1.0" encoding="UTF-8"?><worksheet '
        'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        f'<dimension ref="{dim}"/><sheetData>{rows}</sheetData></worksheet>'
    ).encode()
    base = make_xlsx({"S": [["x"]]})
    repl = {"xl/worksheets/sheet1.xml": sheet}
    add = {}
    if sst is not None:
        ct = zipfile.ZipFile(io.BytesIO(base)).read("[Content_Types].xml")
        repl["[Content_Types].xml"] = ct.replace(b"</Types>", SST_CT + b"</Types>")
        add["xl/sharedStrings.xml"] = sst
    return _replace(base, repl, add)


def _inline(ref: str, text: str) -> str:
    return f'<c r="{ref}" t="inlineStr"><is><t>{text}</t></is></c>'


@pytest.mark.xfail(strict=True, reason="REVIEW REPRO: columns past AY dropped with no note")
def test_repro_values_past_column_ay_are_dropped_silently() -> None:
    data = _xlsx(f'<row r="1">{_inline("A1", "name")}{_inline("BA1", "TOTAL 999")}</row>', "A1:BA1")
    got = office_read.read("xlsx", data, 15_000, time.monotonic() + 30, LIMITS)
    assert isinstance(got, office.OfficeText)
    assert "columns after AX not read" in got.text  # got: '--- sheet S ---\n1: name'


@pytest.mark.xfail(strict=True, reason="REVIEW REPRO: values beyond the caps reported as none")
def test_repro_a_sheet_with_values_only_past_the_caps_is_called_empty() -> None:
    data = _xlsx(f'<row r="1">{_inline("BA1", "far")}</row>', "A1:BA1")
    got = office_read.read("xlsx", data, 15_000, time.monotonic() + 30, LIMITS)
    assert got != office.NO_VALUES  # got: "no values in it"


@pytest.mark.xfail(strict=True, reason="REVIEW REPRO: a slow workbook load leaves no row read")
async def test_repro_first_row_of_a_workbook_is_not_always_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stands for a load_workbook that took READ_SECS (1M shared strings: 12-16 s here):
    the sheet's header line counts as "the first line", so no row is read and the
    person is told "not read in time" although the workbook is parsed."""
    monkeypatch.setattr(office, "READ_SECS", 0.0)
    data = make_xlsx({"S": [["a", 1], ["b", 2]]})
    _, missing = await read_texts(
        Files({"x": data}),
        [Attachment("document", "s.xlsx", XLSX, 0, "x")],
        "t",
        Room(MAX_TEXT_TOKENS),
        DownloadBudget(0),
        pdf_limit=LIMIT,
    )
    assert missing == [], missing  # got: ['s.xlsx: not read in time (...)']


@pytest.mark.xfail(
    strict=True, reason="REVIEW REPRO: libxml2 resource limits called 'not a Word document'"
)
def test_repro_a_too_deep_word_file_is_not_called_damaged() -> None:
    nested = "<w:tbl><w:tr><w:tc>" * 100 + "<w:p/>" + "</w:tc></w:tr></w:tbl>" * 100
    got = office_read.read("docx", _docx(nested), 15_000, time.monotonic() + 30, LIMITS)
    assert got != office.NOT_DOCX  # got: NOT_DOCX (XMLSyntaxError ERR_RESOURCE_LIMIT, depth 256)


@pytest.mark.xfail(
    strict=True, reason="REVIEW REPRO: the ratio check trusts the declared compressed size"
)
def test_repro_the_ratio_check_believes_the_central_directory() -> None:
    xml = f"<w:document {W}><w:body>" + "<w:p><w:r><w:t>a</w:t></w:r></w:p>" * 100_000
    data = _replace(
        make_docx(["x"]), {"word/document.xml": (xml + "</w:body></w:document>").encode()}
    )
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo("word/document.xml")
    assert info.file_size > 200 * info.compress_size  # honestly refused...
    assert office_read.zip_refusal(data, "docx", LIMITS)
    b = bytearray(data)  # ...then 4 bytes of the central directory claim 10:1
    i = 0
    while True:
        i = b.find(b"PK\x01\x02", i)
        n = struct.unpack_from("<H", b, i + 28)[0]
        if bytes(b[i + 46 : i + 46 + n]) == b"word/document.xml":
            struct.pack_into("<I", b, i + 20, info.file_size // 10)
            break
        i += 4
    assert office_read.zip_refusal(bytes(b), "docx", LIMITS)  # got: "" (accepted)
    assert zipfile.ZipFile(io.BytesIO(bytes(b))).read("word/document.xml")  # and it unpacks


@pytest.mark.xfail(
    strict=True, reason="REVIEW REPRO: READ_SECS does not bound a child; others starve"
)
async def test_repro_one_slow_workbook_holds_the_reading_turn_to_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A workbook whose load (shared strings) outlasts READ_SECS holds the worker's one
    reading turn until its message's deadline; another chat's small Word file, posted
    just after, is "not read in time".  In production: a 9.3 MB .xlsx of 3M shared
    strings (10:1, passes every zip check) held it for the full 30 s (scratch/starve.py)."""
    monkeypatch.setattr(documents, "FETCH_DEADLINE_SECS", 5.0)
    monkeypatch.setattr(office, "READ_SECS", 0.5)
    rnd = random.Random(1)
    words = ("".join(rnd.choices(string.ascii_letters, k=3)) for _ in range(800_000))
    sst = (
        '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        + "".join(f"<si><t>{w}</t></si>" for w in words)
        + "</sst>"
    ).encode()
    slow = _xlsx('<row r="1"><c r="A1" t="s"><v>0</v></c></row>', sst=sst)

    async def chat(name: str, data: bytes, mime: str, delay: float) -> list[str]:
        await asyncio.sleep(delay)
        _, missing = await read_texts(
            Files({"r": data}),
            [Attachment("document", name, mime, 0, "r")],
            name,
            Room(MAX_TEXT_TOKENS),
            DownloadBudget(0),
            pdf_limit=LIMIT,
        )
        return missing

    _, victim = await asyncio.gather(
        chat("slow.xlsx", slow, XLSX, 0.0), chat("victim.docx", make_docx(["hi"]), DOCX, 1.0)
    )
    assert victim == [], victim  # got: ['victim.docx: not read in time (...)']
