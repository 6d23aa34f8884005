"""Small real PDFs for tests: written by hand, one Helvetica line a page."""

from __future__ import annotations

import io
import zlib

from pypdf import PdfReader, PdfWriter


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def bomb_pdf(draws: int) -> bytes:
    """A small PDF whose one page draws a character ``draws`` times: a content stream
    of ~``26 * draws`` bytes, deflated to a few KB, that takes pypdf seconds to minutes
    and hundreds of MB to extract (a hostile PDF)."""
    content = b"BT /F1 12 Tf 72 720 Td " + b"(x) Tj 0 -1 Td " * draws + b"ET"
    return make_pdf([None], contents=[zlib.compress(content, 9)], flate=True)


def make_pdf(
    pages: list[str | None], *, contents: list[bytes] | None = None, flate: bool = False
) -> bytes:
    """A PDF of one page per item: the text drawn on it, or nothing for None (a page
    with no text, like a scanned one).  ``contents``: the pages' content streams as
    they are (``flate``: deflated)."""
    n = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        content = (
            contents[i]
            if contents is not None
            else b""
            if text is None
            else f"BT /F1 12 Tf 72 720 Td ({_escape(text)}) Tj ET".encode()
        )
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R"
            " /Resources << /Font << /F1 3 0 R >> >> >>".encode()
        )
        filt = b" /Filter /FlateDecode" if flate else b""
        objects.append(b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(content), filt, content))
    return _file(objects)


def encrypted(data: bytes, user_password: str, algorithm: str = "RC4-128") -> bytes:
    """``data`` encrypted: opened with ``user_password``, which may be empty (a PDF
    only restricting printing, copying...).  ``AES-256`` needs ``cryptography``."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm=algorithm)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def surrogate_pdf() -> bytes:
    """A one-page PDF drawing "ABAB" whose font's ToUnicode map gives "A" as U+D800, a
    lone surrogate (pypdf decodes the map with "surrogatepass"): its text is "?B?B"
    with an unencodable character for each "?"."""
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        b"/CMapName /X def 1 begincodespacerange <00> <FF> endcodespacerange\n"
        b"2 beginbfchar <41> <D800> <42> <0042> endbfchar\n"
        b"endcmap CMapName currentdict /CMap defineresource pop end end\n"
    )
    content = b"BT /F1 12 Tf 72 720 Td (ABAB) Tj ET\n"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%sendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
        b"<< /Length %d >>\nstream\n%sendstream" % (len(cmap), cmap),
    ]
    return _file(objects)


def _file(objects: list[bytes]) -> bytes:
    """Numbered objects (1 is the catalog) as a PDF file with its cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
