"""Small real Word and Excel files for tests, written by python-docx and openpyxl
themselves, and hostile zips made with zipfile."""

from __future__ import annotations

import io
import re
import struct
import zipfile

from docx import Document
from openpyxl import Workbook

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # how .doc / .xls and encrypted ones start


def make_docx(paragraphs: list[str]) -> bytes:
    """A .docx of plain paragraphs."""
    document = Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def report_docx() -> bytes:
    """A title, headings, a list item and a table between two paragraphs, one of its
    header cells spanning two columns."""
    document = Document()
    document.add_heading("Quarterly report", 0)
    document.add_paragraph("Revenue grew in every region.")
    document.add_heading("Figures", 1)
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([["Region", "Q1", "Q2"], ["North", "10", "12"], ["South", "", "7"]]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    table.cell(0, 1).merge(table.cell(0, 2)).text = "Sales"
    document.add_paragraph("")  # an empty paragraph: left out
    document.add_heading("Risks", 2)
    document.add_paragraph("Costs may rise.", style="List Bullet")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    """A workbook of these sheets, each a list of rows (None: an empty cell)."""
    wb = Workbook()
    wb.remove(wb.active)
    for title, rows in sheets.items():
        ws = wb.create_sheet(title)
        for row in rows:
            ws.append(row)
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


def cache_value(xlsx: bytes, sheet: int, ref: str, value: str) -> bytes:
    """The workbook with the formula in cell ``ref`` of sheet ``sheet`` (1-based) given
    the result Excel would have saved with it (openpyxl saves formulas without one)."""
    member = f"xl/worksheets/sheet{sheet}.xml"
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(xlsx)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == member:
                pattern = rf'(<c r="{ref}"[^>]*>)(<f>[^<]*</f>)(<v\s*/>|<v></v>)?'.encode()
                data, n = re.subn(pattern, rb"\1\2<v>" + value.encode() + b"</v>", data)
                assert n == 1, "no formula in that cell"
            dst.writestr(info, data)
    return out.getvalue()


def declare_dimension(xlsx: bytes, sheet: int, ref: str) -> bytes:
    """The workbook with sheet ``sheet`` (1-based) claiming to span ``ref`` only, as
    files from some writers wrongly do."""
    member = f"xl/worksheets/sheet{sheet}.xml"
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(xlsx)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == member:
                data, n = re.subn(
                    rb'<dimension ref="[^"]*"', f'<dimension ref="{ref}"'.encode(), data
                )
                assert n == 1
            dst.writestr(info, data)
    return out.getvalue()


def zip_of(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def zip_bomb(name: str = "word/document.xml", size: int = 60_000_000) -> bytes:
    """A zip of one member of ``size`` zero bytes: about 60 kB packed per 60 MB."""
    out = io.BytesIO()
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(out, "w") as z, z.open(info, "w", force_zip64=True) as f:
        chunk = bytes(1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
        f.write(bytes(size & ((1 << 20) - 1)))
    return out.getvalue()


def under_declared(docx: bytes, member: str, declared: int) -> bytes:
    """The .docx with ``member`` replaced by its own start and 20 MB of blanks, the
    zip saying it unpacks to ``declared`` bytes (the central directory and the local
    header both lie)."""
    src = zipfile.ZipFile(io.BytesIO(docx))
    head = src.read(member)[:200]
    members = {i.filename: src.read(i) for i in src.infolist()}
    members[member] = head + b" " * 20_000_000
    data = bytearray(zip_of(members))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        info = z.getinfo(member)
    # local header: uncompressed size at offset 22; central directory entry: at 24
    struct.pack_into("<I", data, info.header_offset + 22, declared)
    end = data.rindex(b"PK\x05\x06")  # end of central directory: where it starts, at 16
    (entry,) = struct.unpack_from("<I", data, end + 16)
    while True:
        (length,) = struct.unpack_from("<H", data, entry + 28)
        if data[entry + 46 : entry + 46 + length] == member.encode():
            break
        (extra, comment) = struct.unpack_from("<HH", data, entry + 30)
        entry += 46 + length + extra + comment
    struct.pack_into("<I", data, entry + 24, declared)
    return bytes(data)
