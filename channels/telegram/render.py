"""OutboundMessage -> Telegram message parts (pure).

Markdown from the LLM becomes plain text plus ``MessageEntity`` objects
(telegramify-markdown), never hand-escaped MarkdownV2, so there is nothing to
escape wrongly.  Long answers are split at 4096 UTF-16 code units on
paragraph, then line, then word boundaries; a split never lands inside a code
block or a link unless that block alone is longer than a message (then each
piece stays a code block).  Formatting that crosses a split is clipped into
both parts.  Anything that goes wrong while rendering falls back to plain text:
``render`` never raises.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyromark
import telegramify_markdown
from telegram import InlineKeyboardButton, InlineKeyboardMarkup, MessageEntity
from telegramify_markdown.config import RenderConfig
from telegramify_markdown.converter import STANDARD_OPTIONS

from agent_core.events import Button
from channels.graphemes import back_to_boundary, is_boundary
from channels.markdown_source import cjk_emphasis, protect_bare_urls

log = logging.getLogger(__name__)

MAX_TEXT = 4096  # UTF-16 code units per message
EMPTY_TEXT = "…"  # Telegram refuses empty messages
MAX_ENTITIES = 100  # Telegram ignores the entities after the 100th
MAX_ENTITY_BYTES = 8000  # below Telegram's ~9,500 (undocumented) for all entities
ENTITY_BYTES = 16  # what one entity costs besides its URL (a safe guess)

# Entities a split must not cut (unless they alone exceed a message).
_UNSPLITTABLE = frozenset({"pre", "code", "text_link", "url", "email", "mention"})


@dataclass(frozen=True, slots=True)
class Part:
    """One Telegram message: text and its entities (offsets in UTF-16 units)."""

    text: str
    entities: tuple[MessageEntity, ...] = ()

    def plain(self) -> Part:
        """This part without formatting, each link's address written after its
        text (so a refused format costs looks, not links); text only if the
        addresses would not fit."""
        links = sorted(
            (e for e in self.entities if e.type == "text_link" and e.url),
            key=lambda e: e.offset,
            reverse=True,
        )
        if not links:
            return Part(self.text)
        off = _offsets(self.text)
        index = {u: i for i, u in enumerate(off)}
        text = self.text
        for e in links:
            end = index.get(e.offset + e.length)
            start = index.get(e.offset)
            if end is None or start is None or text[start:end] == e.url:
                continue
            text = f"{text[:end]} ({e.url}){text[end:]}"
        if len(text.encode("utf-16-le")) // 2 > MAX_TEXT:
            return Part(self.text)
        return Part(text)

    def digest(self, markup: InlineKeyboardMarkup | None = None) -> str:
        """A short fingerprint of what this part shows (to skip no-op edits)."""
        h = zlib.crc32(self.text.encode("utf-8", "surrogatepass"))
        for e in self.entities:
            h = zlib.crc32(f"{e.type}.{e.offset}.{e.length}.{e.url}.{e.language}".encode(), h)
        if markup is not None:
            for row in markup.inline_keyboard:
                for b in row:
                    h = zlib.crc32(f"{b.text}|{b.callback_data}".encode(), h)
        return format(h, "08x")


def _offsets(text: str) -> list[int]:
    """UTF-16 offset of every Python index (length len(text) + 1)."""
    out = [0] * (len(text) + 1)
    cum = 0
    for i, ch in enumerate(text):
        out[i] = cum
        cum += 2 if ord(ch) > 0xFFFF else 1
    out[len(text)] = cum
    return out


@dataclass(slots=True)
class _Span:
    start: int  # python indices
    end: int
    entity: MessageEntity


def _to_spans(text: str, entities: Sequence[MessageEntity], off: list[int]) -> list[_Span]:
    # Map UTF-16 offsets back to Python indices.
    index = {u: i for i, u in enumerate(off)}
    spans = []
    for e in entities:
        s = index.get(e.offset)
        t = index.get(e.offset + e.length)
        if s is None or t is None or t <= s:
            continue  # lands inside a surrogate pair or empty: drop it
        spans.append(_Span(s, t, e))
    spans.sort(key=lambda sp: sp.start)
    return spans


class _EntityCap:
    """Where a part starting at ``start`` must end at the latest to stay within
    Telegram's entity limits: it applies only the first 100 entities of a
    message and refuses one whose entities are too large in total
    (ENTITIES_TOO_LONG, about 9,500 bytes, link addresses included).

    Parts are asked for in text order, so the spans already behind are kept as
    a small open set instead of being rescanned for every part.
    """

    def __init__(self, spans: list[_Span]) -> None:
        self.spans = spans  # sorted by start
        self.next = 0  # the first span not yet started
        self.open: list[_Span] = []  # started, maybe still running

    def __call__(self, start: int) -> int:
        spans = self.spans
        while self.next < len(spans) and spans[self.next].start < start:
            self.open.append(spans[self.next])
            self.next += 1
        self.open = [sp for sp in self.open if sp.end > start]
        count, size = 0, 0
        for sp in self.open:
            count += 1
            size += ENTITY_BYTES + len((sp.entity.url or "").encode())
        for i in range(self.next, len(spans)):  # no slice: that would copy the rest
            sp = spans[i]
            count += 1
            size += ENTITY_BYTES + len((sp.entity.url or "").encode())
            if (count > MAX_ENTITIES or size > MAX_ENTITY_BYTES) and sp.start > start:
                return sp.start
        return sys.maxsize


def _cut_point(text: str, start: int, end: int, protected: list[tuple[int, int]]) -> int:
    """Best index in (start, end] to end a part at."""

    def ok(pos: int) -> bool:
        return all(not (s < pos < t) for s, t in protected)

    half = start + (end - start) // 2
    found: list[int] = []
    for sep in ("\n\n", "\n", " "):
        pos = text.rfind(sep, start, end)
        while pos > start and not ok(pos + len(sep)):
            pos = text.rfind(sep, start, pos)
        if pos > start:
            cut = pos + len(sep)
            if cut >= half:
                return cut
            found.append(cut)
    if found:
        return max(found)
    # No boundary at all: hard cut, outside protected spans when possible, and never
    # inside a character a person sees as one (a flag, an emoji sequence, an accent).
    cut = end
    while cut > start + 1 and not (ok(cut) and is_boundary(text, cut, start)):
        cut -= 1
    if cut > start + 1:
        return cut
    return back_to_boundary(text, end, start)


def split(text: str, entities: Sequence[MessageEntity] = (), limit: int = MAX_TEXT) -> list[Part]:
    """Split into parts of at most ``limit`` UTF-16 units; whitespace-only parts vanish."""
    off = _offsets(text)
    spans = _to_spans(text, entities, off)
    n = len(text)
    protected = [
        (sp.start, sp.end)
        for sp in spans
        if sp.entity.type in _UNSPLITTABLE and off[sp.end] - off[sp.start] <= limit
    ]
    code = [(sp.start, sp.end) for sp in spans if sp.entity.type in ("pre", "code")]

    def in_code(i: int) -> bool:  # whitespace in code is content (indentation)
        return any(s <= i < t for s, t in code)

    entity_cap = _EntityCap(spans)
    ranges: list[tuple[int, int]] = []
    start = 0
    while start < n:
        # Skip leading whitespace of the part.
        while start < n and text[start].isspace() and not in_code(start):
            start += 1
        if start >= n:
            break
        cap = entity_cap(start)
        if off[n] - off[start] <= limit and cap >= n:
            ranges.append((start, n))
            break
        end = start
        budget = off[start] + limit
        lo, hi = start, n
        while lo < hi:  # largest end with off[end] <= budget
            mid = (lo + hi + 1) // 2
            if off[mid] <= budget:
                lo = mid
            else:
                hi = mid - 1
        end = min(lo, cap)
        cut = _cut_point(text, start, end, protected)
        ranges.append((start, cut))
        start = cut
    parts: list[Part] = []
    upcoming, running = 0, []  # spans in text order: not yet reached / reached
    for s, t in ranges:
        while t > s and text[t - 1].isspace() and (text[t - 1] == "\n" or not in_code(t - 1)):
            t -= 1
        if not text[s:t].strip():  # Telegram refuses a message of only whitespace
            continue
        base = off[s]
        ents: list[MessageEntity] = []
        while upcoming < len(spans) and spans[upcoming].start < t:
            running.append(spans[upcoming])
            upcoming += 1
        running = [sp for sp in running if sp.end > s]
        for sp in running:
            cs, ct = max(sp.start, s), min(sp.end, t)
            if ct <= cs:
                continue
            e = sp.entity
            ents.append(
                MessageEntity(
                    type=e.type,
                    offset=off[cs] - base,
                    length=off[ct] - off[cs],
                    url=e.url,
                    language=e.language,
                    user=e.user,
                    custom_emoji_id=e.custom_emoji_id,
                )
            )
        parts.append(Part(text[s:t], tuple(ents)))
    return parts


_CONFIG = RenderConfig.isolated()
_CONFIG.markdown_symbol.task_uncompleted = "\N{WHITE LARGE SQUARE}"  # not a ticked box
_BR = re.compile(rb"<br\s*/?>", re.IGNORECASE)
_SPOILER_TAGS = frozenset({"<tg-spoiler>", "</tg-spoiler>"})
_SHELL_VAR = re.compile(r"[A-Z_][A-Z0-9_]+(?![a-z])")  # $HOME, $PATH: not math
# What makes `$…$` a formula rather than words: an operator, a command, a digit
# or a single letter ($x$).  `$src/$dst` is ruled out by what follows it.
_MATH_HINT = re.compile(r"[\\^_=+\-*<>()\[\]{}|!,.'0-9]|^[A-Za-z]$")
_PIPES = re.compile(rb"\|{2,}")
_BLANK_LINE = re.compile(rb"\n[ \t]*\n")
_BLOCKS = frozenset({"pre", "blockquote", "expandable_blockquote"})


def _chat_text(markdown: str) -> str:
    """Rewrite what the Markdown parser would hide from a chat reader.

    LLMs write ``<your-token>``, ``Vec<T>`` and ``<br>`` as text; the converter
    drops anything that parses as HTML, so such text is escaped (``<br>`` becomes
    a line break, or a space in a table).  ``$HOME/$USER``, ``$src/$dst`` and
    ``$foo$bar`` are not math, and ``a || b`` is not a spoiler.  A link in a table
    (tables become fixed-width text) keeps its address as ``text (url)``.
    Positions come from the parser itself (pyromark, as the converter uses), so
    code spans and blocks are never touched.  Each pass may uncover more (the rest
    of an HTML block reads as inline HTML), so it runs until nothing is left.
    """
    source = markdown.encode("utf-8")
    for _ in range(20):
        edits: list[tuple[int, int, bytes]] = []
        in_table = False
        for payload, span in pyromark.events_with_range(
            source.decode("utf-8"), options=STANDARD_OPTIONS
        ):
            if not isinstance(payload, dict):
                continue
            a, b = span["start"], span["end"]
            start = payload.get("Start")
            if isinstance(start, dict) and "Table" in start:
                in_table = True
            elif payload.get("End") == "Table":
                in_table = False
            elif "InlineHtml" in payload or "Html" in payload:
                html = payload.get("InlineHtml") or payload.get("Html") or ""
                if html.strip().lower() in _SPOILER_TAGS:
                    continue
                if _BR.fullmatch(html.strip().encode()):
                    edits.append((a, b, b" " if in_table else b"\n"))
                elif (lt := source.find(b"<", a, b)) >= 0:
                    edits.append((lt, lt, b"\\"))
            elif "InlineMath" in payload and not _is_math(payload["InlineMath"], source, b):
                edits.append((a, a, b"\\"))
            elif in_table and isinstance(start, dict) and "Link" in start:
                link = start["Link"]
                close = source.rfind(b"](", a, b)
                if link.get("link_type") == "Inline" and close > a:
                    label = source[a + 1 : close]
                    url = link.get("dest_url", "").encode()
                    edits.append((a, b, label + b" (" + url + b")"))
        if not edits:
            break
        done = len(source)  # edits apply back to front; an overlapping one waits
        for a, b, new in sorted(set(edits), reverse=True):
            if b <= done:
                source = source[:a] + new + source[b:]
                done = a
    return _spoilers_only_where_meant(source).decode("utf-8")


def _char_before(source: bytes, pos: int) -> str:
    start = pos - 1
    while start > 0 and 0x80 <= source[start] < 0xC0:  # a UTF-8 continuation byte
        start -= 1
    return source[max(start, 0) : pos].decode("utf-8", "ignore")


def _char_after(source: bytes, pos: int) -> str:
    return source[pos : pos + 4].decode("utf-8", "ignore")[:1]


def _is_math(formula: str, source: bytes, end: int) -> bool:
    """Whether ``$formula$`` (ending at byte ``end``) is meant as inline LaTeX."""
    after = _char_after(source, end)
    if after.isalnum() or after == "/":  # $src/$dst, $foo$bar: shell variables
        return False
    return not _SHELL_VAR.match(formula) and bool(_MATH_HINT.search(formula))


def _code_and_tables(source: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Byte ranges of code (spans and blocks) and of tables, as the parser sees them."""
    code: list[tuple[int, int]] = []
    tables: list[tuple[int, int]] = []
    for payload, span in pyromark.events_with_range(
        source.decode("utf-8"), options=STANDARD_OPTIONS
    ):
        if not isinstance(payload, dict):
            continue
        start = payload.get("Start")
        where = (span["start"], span["end"])
        if "Code" in payload or (isinstance(start, dict) and "CodeBlock" in start):
            code.append(where)
        elif isinstance(start, dict) and "Table" in start:
            tables.append(where)
    return code, tables


def _spoilers_only_where_meant(source: bytes) -> bytes:
    """Escape every ``||`` that is not one of a hugging pair.

    The converter makes a spoiler of anything between two ``||`` (outside code),
    so ``x || y || z`` lost `` y `` and ``a||b or c||d`` lost its bars.  Like
    emphasis, ``||`` opens a spoiler only before a word and not inside one, and
    closes it only after a word and not inside one, within a paragraph.  In a
    table ``||`` is an empty cell: the bars are kept apart instead.
    """
    if b"||" not in source:
        return source
    code, tables = _code_and_tables(source)
    edits: list[tuple[int, bytes]] = []  # (position, what to insert there)
    cursor = 0
    for start, end in [*code, (len(source), len(source))]:
        edits += _unpaired_bar_edits(source, cursor, start, tables)
        cursor = max(cursor, end)
    for pos, new in sorted(edits, reverse=True):
        source = source[:pos] + new + source[pos:]
    return source


def _unpaired_bar_edits(
    source: bytes, start: int, end: int, tables: list[tuple[int, int]]
) -> list[tuple[int, bytes]]:
    """Insertions that leave only hugging ``||`` pairs in ``source[start:end]``
    (the converter pairs the bars of each stretch between code separately)."""
    edits: list[tuple[int, bytes]] = []
    opener: int | None = None
    for run in _PIPES.finditer(source, start, end):
        a, b = run.span()
        if any(s <= a < t for s, t in tables):
            edits += [(i, b" ") for i in range(a + 1, b)]  # | a || b | has an empty cell
            continue
        if opener is not None and _BLANK_LINE.search(source, opener, a):
            edits += _escaped_bars(source, opener, opener + 2)
            opener = None
        before, after = _char_before(source, a), _char_after(source, b)
        pair = b - a == 2 and before != "\\"
        if pair and opener is not None and before.strip() and not after.isalnum():
            opener = None  # closes the pair: both stay bars for the converter
        elif pair and after.strip() and not before.isalnum():
            if opener is not None:  # a later opener wins: ||a ||b|| hides b
                edits += _escaped_bars(source, opener, opener + 2)
            opener = a
        else:
            edits += _escaped_bars(source, a, b)
    if opener is not None:
        edits += _escaped_bars(source, opener, opener + 2)
    return edits


def _escaped_bars(source: bytes, a: int, b: int) -> list[tuple[int, bytes]]:
    first = a + 1 if _char_before(source, a) == "\\" else a  # already escaped
    return [(i, b"\\") for i in range(first, b)]


def _blocks_on_own_lines(
    text: str, entities: list[telegramify_markdown.MessageEntity]
) -> tuple[str, list[telegramify_markdown.MessageEntity]]:
    """Start every code block and quote on a line of its own.

    The converter glues a list item's first block onto the item's text
    (``1. Install it:pip install parley``); a line break goes in before it, and
    the entities after (or around) it move by one UTF-16 unit.
    """
    if not any(e.type in _BLOCKS for e in entities):
        return text, entities  # most answers: nothing to look at
    off = _offsets(text)
    index = {u: i for i, u in enumerate(off)}
    glued = {
        e.offset
        for e in entities
        if e.type in _BLOCKS and index.get(e.offset) and text[index[e.offset] - 1] != "\n"
    }
    for at in sorted(glued, reverse=True):  # back to front: earlier offsets hold
        i = index[at]
        text = f"{text[:i]}\n{text[i:]}"
        entities = [_moved_by_break(e, at) for e in entities]
    return text, entities


def _moved_by_break(
    e: telegramify_markdown.MessageEntity, at: int, n: int = 1
) -> telegramify_markdown.MessageEntity:
    """``e`` after ``n`` UTF-16 units were inserted at ``at``."""
    if e.offset >= at:
        return dataclasses.replace(e, offset=e.offset + n)
    if e.offset + e.length > at:
        return dataclasses.replace(e, length=e.length + n)
    return e


def _linkable(url: str) -> bool:
    """Whether Telegram makes a link of ``url``: http(s) to a host with a dot in
    its name (not ``localhost``, not a file path), tg: or mailto:.  Other schemes
    are refused (and unsafe: ``javascript:``)."""
    low = url.lower()
    if low.startswith(("tg://", "mailto:")):
        return True
    if not low.startswith(("http://", "https://")):
        return False
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return "." in host.strip(".")


def _unlinkable_written_out(
    text: str, entities: list[telegramify_markdown.MessageEntity]
) -> tuple[str, list[telegramify_markdown.MessageEntity]]:
    """Links Telegram would not make (relative paths, ``localhost``, other
    schemes) lose their entity, and their address is written after their text,
    ``text (address)`` as in :meth:`Part.plain`, so the reader still has it."""
    dropped = [e for e in entities if e.type == "text_link" and not _linkable(e.url or "")]
    if not dropped:
        return text, entities
    entities = [e for e in entities if all(e is not d for d in dropped)]
    off = _offsets(text)
    index = {u: i for i, u in enumerate(off)}
    for e in sorted(dropped, key=lambda d: d.offset + d.length, reverse=True):
        at = e.offset + e.length  # back to front: earlier offsets hold
        start, end = index.get(e.offset), index.get(at)
        url = e.url or ""
        if start is None or end is None or not url or text[start:end] == url:
            continue
        note = f" ({url})"
        text = f"{text[:end]}{note}{text[end:]}"
        n = len(note.encode("utf-16-le", "surrogatepass")) // 2
        entities = [_moved_by_break(x, at, n) for x in entities]
    return text, entities


def _links_not_code(
    entities: list[telegramify_markdown.MessageEntity],
) -> list[telegramify_markdown.MessageEntity]:
    """Drop each ``code`` entity that overlaps a link: ``[`config.py`](url)``.

    Code and pre can't contain, nor be part of, other entities (Bot API,
    "Formatting options").  Telegram does not refuse such a message: it keeps the
    first of the two (tdlib's fix_entities sorts a code entity before a link over
    the same text) and drops the other, so the label showed as grey code that opens
    nothing.  The link matters more: its label is left plain inside it.
    """
    links = [(e.offset, e.offset + e.length) for e in entities if e.type == "text_link"]
    if not links:
        return entities
    return [
        e
        for e in entities
        if e.type != "code" or all(e.offset + e.length <= a or b <= e.offset for a, b in links)
    ]


def _entities_from_markdown(markdown: str) -> tuple[str, list[MessageEntity]]:
    source = protect_bare_urls(_chat_text(markdown), STANDARD_OPTIONS)
    source = cjk_emphasis(source, STANDARD_OPTIONS)
    text, raw = telegramify_markdown.convert(source, config=_CONFIG)
    text, raw = _blocks_on_own_lines(text, raw)
    text, raw = _unlinkable_written_out(text, raw)
    raw = _links_not_code(raw)
    ents = []
    for e in raw:
        ents.append(
            MessageEntity(
                type=e.type,
                offset=e.offset,
                length=e.length,
                url=e.url,
                language=e.language,
                custom_emoji_id=e.custom_emoji_id,
            )
        )
    return text, ents


def render_text(markdown: str) -> list[Part]:
    """Markdown -> formatted parts; plain parts if formatting fails. Never raises."""
    try:
        text, ents = _entities_from_markdown(markdown)
        parts = split(text, ents)
    except Exception:  # a renderer bug must not cost the user the answer
        log.warning("markdown rendering failed; sending plain text", exc_info=True)
        parts = []
    if not parts:
        parts = render_plain(markdown)
    return parts


def render_plain(text: str) -> list[Part]:
    """The text as-is (no entities), split; never empty."""
    try:
        parts = split(text)
    except Exception:
        log.warning("plain split failed", exc_info=True)
        parts = [
            Part(text[i : i + 2000])
            for i in range(0, len(text), 2000)
            if text[i : i + 2000].strip()
        ]
    return parts or [Part(EMPTY_TEXT)]


def keyboard(buttons: Sequence[Button]) -> InlineKeyboardMarkup | None:
    """Buttons -> one row of an inline keyboard; callback_data is the opaque payload."""
    if not buttons:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(b.label, callback_data=b.payload) for b in buttons]]
    )
