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

import logging
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import telegramify_markdown
from telegram import InlineKeyboardButton, InlineKeyboardMarkup, MessageEntity

from agent_core.events import Button

log = logging.getLogger(__name__)

MAX_TEXT = 4096  # UTF-16 code units per message
EMPTY_TEXT = "…"  # Telegram refuses empty messages

# Entities a split must not cut (unless they alone exceed a message).
_UNSPLITTABLE = frozenset({"pre", "code", "text_link", "url", "email", "mention"})
_SAFE_URL_PREFIXES = ("http://", "https://", "tg://", "mailto:")


@dataclass(frozen=True, slots=True)
class Part:
    """One Telegram message: text and its entities (offsets in UTF-16 units)."""

    text: str
    entities: tuple[MessageEntity, ...] = ()

    def plain(self) -> Part:
        return Part(self.text)

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
    return spans


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
    # No boundary at all: hard cut, outside protected spans when possible.
    cut = end
    while cut > start + 1 and not ok(cut):
        cut -= 1
    return cut if cut > start + 1 else end


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
    ranges: list[tuple[int, int]] = []
    start = 0
    while start < n:
        # Skip leading whitespace of the part.
        while start < n and text[start].isspace():
            start += 1
        if start >= n:
            break
        if off[n] - off[start] <= limit:
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
        end = lo
        cut = _cut_point(text, start, end, protected)
        ranges.append((start, cut))
        start = cut
    parts: list[Part] = []
    for s, t in ranges:
        while t > s and text[t - 1].isspace():
            t -= 1
        if t <= s:
            continue
        base = off[s]
        ents: list[MessageEntity] = []
        for sp in spans:
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


def _entities_from_markdown(markdown: str) -> tuple[str, list[MessageEntity]]:
    text, raw = telegramify_markdown.convert(markdown)
    ents = []
    for e in raw:
        if e.type == "text_link" and not (e.url or "").lower().startswith(_SAFE_URL_PREFIXES):
            continue  # Telegram refuses such links (and they are unsafe anyway)
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
