"""Small real Word, Excel and PowerPoint files for tests, built with python-docx,
openpyxl and python-pptx."""

from __future__ import annotations

import copy
import io
import random
import string
import zipfile

import docx
import openpyxl
import pptx
from docx.oxml.ns import qn
from docx.oxml.parser import OxmlElement
from pptx.util import Inches

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


def make_docx(items: list[str | list[list[str]]], *, heading: str = "") -> bytes:
    """A Word file: a paragraph per string, a table per list of rows, in order, after
    a level-1 heading when one is given."""
    document = docx.Document()
    if heading:
        document.add_heading(heading, level=1)
    for item in items:
        if isinstance(item, str):
            document.add_paragraph(item)
            continue
        table = document.add_table(rows=len(item), cols=max(len(r) for r in item))
        for r, row in enumerate(item):
            for c, text in enumerate(row):
                table.cell(r, c).text = text
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def merged_docx(rows: int, cols: int = 3) -> bytes:
    """A Word file that opens with a table of ``rows`` rows, every column merged
    vertically from the first row (``w:vMerge``), all empty but the first ("top") and
    the last ("bottom", not merged), then a paragraph: a few tens of KB that
    python-docx's cell API takes minutes or more on (its merge handling is quadratic,
    and recursive).  Built in the XML, which is linear."""
    document = docx.Document()
    table = document.add_table(rows=1, cols=cols)
    table.cell(0, 0).text = "top"
    first = table._tbl.tr_lst[0]
    for tc in first.tc_lst:
        merge = OxmlElement("w:vMerge")
        merge.set(qn("w:val"), "restart")
        tc.get_or_add_tcPr().append(merge)
    follower = copy.deepcopy(first)
    for tc in follower.tc_lst:
        for p in tc.findall(qn("w:p")):
            tc.remove(p)
        tc.append(OxmlElement("w:p"))
        merge = tc.tcPr.find(qn("w:vMerge"))
        del merge.attrib[qn("w:val")]  # continues the cell above
    for _ in range(rows - 2):
        table._tbl.append(copy.deepcopy(follower))
    last = table.add_row()
    last.cells[0].text = "bottom"
    document.add_paragraph("after the table")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def long_docx(paragraphs: int) -> bytes:
    """A Word file of ``paragraphs`` short paragraphs (~50 bytes of XML each), written
    into the XML directly (python-docx takes a while to add each)."""
    base = zipfile.ZipFile(io.BytesIO(make_docx(["x"])))
    body = "".join(f"<w:p><w:r><w:t>line {n}</w:t></w:r></w:p>" for n in range(paragraphs))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for info in base.infolist():
            data = base.read(info)
            if info.filename == "word/document.xml":
                i = data.index(b"<w:body>") + len(b"<w:body>")
                data = data[:i] + body.encode() + data[i:]
            z.writestr(info.filename, data)
    return out.getvalue()


def make_xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    """An Excel file: a sheet per name, its rows from A1."""
    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def make_pptx(slides: list[dict[str, object]], *, order: list[int] | None = None) -> bytes:
    """A PowerPoint file: per slide (a dict) an optional ``title``, ``body`` lines (a
    bulleted placeholder), ``table`` rows, ``group`` lines (text boxes in a group),
    ``picture`` (its alternative text), ``notes`` and ``hidden``.  ``order``: the
    slides' show order as indexes into ``slides`` (the files keep their own order)."""
    deck = pptx.Presentation()
    for spec in slides:
        layout = deck.slide_layouts[1 if "body" in spec else 5 if "title" in spec else 6]
        slide = deck.slides.add_slide(layout)
        if "title" in spec:
            slide.shapes.title.text = str(spec["title"])
        if "body" in spec:
            slide.placeholders[1].text = "\n".join(spec["body"])  # type: ignore[arg-type]
        if "table" in spec:
            rows: list[list[str]] = spec["table"]  # type: ignore[assignment]
            frame = slide.shapes.add_table(
                len(rows), len(rows[0]), Inches(1), Inches(2), Inches(6), Inches(2)
            )
            for r, row in enumerate(rows):
                for c, text in enumerate(row):
                    frame.table.cell(r, c).text = text
        if "group" in spec:
            group = slide.shapes.add_group_shape()
            for i, text in enumerate(spec["group"]):  # type: ignore[arg-type]
                box = group.shapes.add_textbox(Inches(1), Inches(4 + i), Inches(3), Inches(1))
                box.text_frame.text = text
        if "picture" in spec:
            pic = slide.shapes.add_picture(io.BytesIO(_PNG), Inches(7), Inches(1))
            pic._element.nvPicPr.cNvPr.set("descr", str(spec["picture"]))
        if "notes" in spec:
            slide.notes_slide.notes_text_frame.text = str(spec["notes"])
        if spec.get("hidden"):
            slide.element.set("show", "0")
    if order is not None:
        ids = deck.slides._sldIdLst
        items = list(ids)
        for item in items:
            ids.remove(item)
        for i in order:
            ids.append(items[i])
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


# a 1 x 1 white PNG
_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8ffff3f0005fe02fea7d6a4e90000000049454e44ae426082"
)


def with_member(data: bytes, name: str, content: bytes) -> bytes:
    """``data`` (a zip) with one more file in it, deflated."""
    out = io.BytesIO(data)
    with zipfile.ZipFile(out, "a", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, content)
    return out.getvalue()


def encrypted_office() -> bytes:
    """The start of what Office writes for a file saved with a password: an OLE (CFB)
    container holding the ``EncryptionInfo`` and ``EncryptedPackage`` streams (their
    names in the directory, UTF-16).  Enough for the check, not a whole file."""
    header = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)
    names = b"".join(
        n.encode("utf-16-le").ljust(64, b"\0") + bytes(64)
        for n in ("Root Entry", "EncryptionInfo", "EncryptedPackage")
    )
    return header + names + bytes(1024)


W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
_SST_TYPE = (
    b'<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
    b'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
)


def replaced(base: bytes, repl: dict[str, bytes], add: dict[str, bytes] | None = None) -> bytes:
    """The zip ``base`` with the files named in ``repl`` replaced, those in ``add``
    added, deflated."""
    src = zipfile.ZipFile(io.BytesIO(base))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info.filename, repl.get(info.filename, src.read(info)))
        for name, data in (add or {}).items():
            z.writestr(name, data)
    return out.getvalue()


def raw_docx(body: str) -> bytes:
    """A Word file whose body is the XML ``body`` (``w:`` elements)."""
    xml = (
        f'<?xml version="1.0" encoding="UTF-8"?><w:document {W_NS}><w:body>{body}'
        "</w:body></w:document>"
    )
    return replaced(make_docx(["x"]), {"word/document.xml": xml.encode()})


def raw_xlsx(rows: str, dim: str = "A1", sst: bytes | None = None) -> bytes:
    """An Excel file of one sheet ("S") whose ``sheetData`` is the XML ``rows``, and
    the shared strings part ``sst`` when one is given."""
    sheet = (
        '<?xml version="1.0" encoding="UTF-8"?><worksheet '
        'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        f'<dimension ref="{dim}"/><sheetData>{rows}</sheetData></worksheet>'
    ).encode()
    base = make_xlsx({"S": [["x"]]})
    repl = {"xl/worksheets/sheet1.xml": sheet}
    add = {}
    if sst is not None:
        types = zipfile.ZipFile(io.BytesIO(base)).read("[Content_Types].xml")
        repl["[Content_Types].xml"] = types.replace(b"</Types>", _SST_TYPE + b"</Types>")
        add["xl/sharedStrings.xml"] = sst
    return replaced(base, repl, add)


def inline(ref: str, text: str) -> str:
    """A cell holding ``text`` as an inline string."""
    return f'<c r="{ref}" t="inlineStr"><is><t>{text}</t></is></c>'


def shared_strings(count: int, seed: int = 1) -> bytes:
    """A shared strings part of ``count`` random 3-letter strings: openpyxl reads them
    all when it opens the workbook (~6 s of CPU a million)."""
    rnd = random.Random(seed)
    words = ("".join(rnd.choices(string.ascii_letters, k=3)) for _ in range(count))
    return (
        '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        + "".join(f"<si><t>{w}</t></si>" for w in words)
        + "</sst>"
    ).encode()
