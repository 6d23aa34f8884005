"""Text from outside (documents, web pages, command output) made safe to store.

A Python string can hold a lone surrogate (U+D800-U+DFFF without its pair): pypdf
decodes a PDF's ToUnicode map with ``surrogatepass``, a web page may declare a codec
that produces them (UTF-7), a tool may decode with ``surrogateescape``.  Such a string
cannot be encoded as UTF-8: the session's JSON (orjson), Redis and the platforms all
refuse it.  Every such text goes through :func:`valid_text` where it enters.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD; a surrogate pair written
    as two code points becomes the one character it stands for.  The same string
    (no copy) when there is none, the common case."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text
