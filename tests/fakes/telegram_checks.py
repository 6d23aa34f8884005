"""What the fake Bot API checks in a request before carrying it out: text
length in UTF-16 units, MarkdownV2, entities and their undocumented size limits,
inline keyboards; and what Telegram keeps of entities that break its nesting
rules (:func:`entities_telegram_keeps`).  Errors are :class:`ApiError`, answered
as Telegram answers."""

from __future__ import annotations

from typing import Any

ENTITY_TYPES = frozenset(
    {
        "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number",
        "bold", "italic", "underline", "strikethrough", "spoiler", "blockquote",
        "expandable_blockquote", "code", "pre", "text_link", "text_mention", "custom_emoji",
    }
)  # fmt: skip
MDV2_RESERVED = set("_*[]()~`>#+-=|{}.!")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        description: str,
        parameters: dict[str, Any] | None = None,
        *,
        gateway: bool = False,
        after: bool = False,
    ):
        self.code = code
        self.description = description
        self.parameters = parameters
        self.gateway = gateway  # answered by the front proxy (nginx HTML), not the API
        self.after = after  # the call was carried out before the error came back
        super().__init__(description)


def _check_mdv2(text: str) -> None:
    """Reject what Telegram's MarkdownV2 parser rejects (the common cases)."""
    i = 0
    open_markers: list[str] = []
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "`":
            fence = "```" if text.startswith("```", i) else "`"
            end = text.find(fence, i + len(fence))
            if end < 0:
                raise ApiError(
                    400, "Bad Request: can't parse entities: Can't find end of code entity"
                )
            i = end + len(fence)
            continue
        if ch in "*_~|" or (ch == "_" and text.startswith("__", i)):
            marker = (
                "||" if text.startswith("||", i) else ("__" if text.startswith("__", i) else ch)
            )
            if marker == "|":
                raise ApiError(
                    400,
                    "Bad Request: can't parse entities: Character '|' is reserved and must be "
                    "escaped with the preceding '\\'",
                )
            if open_markers and open_markers[-1] == marker:
                open_markers.pop()
            else:
                open_markers.append(marker)
            i += len(marker)
            continue
        if ch == "[":
            close = text.find("](", i)
            end = text.find(")", close + 2) if close >= 0 else -1
            if close < 0 or end < 0:
                raise ApiError(400, "Bad Request: can't parse entities: Can't find end of a url")
            i = end + 1
            continue
        if ch == ">" and (i == 0 or text[i - 1] == "\n"):
            i += 1
            continue
        if ch in MDV2_RESERVED:
            raise ApiError(
                400,
                f"Bad Request: can't parse entities: Character '{ch}' is reserved and must be "
                "escaped with the preceding '\\'",
            )
        i += 1
    if open_markers:
        raise ApiError(
            400, f"Bad Request: can't parse entities: Can't find end of {open_markers[-1]} entity"
        )


# Telegram's undocumented entity limits: a message whose entities are too large
# in total (about 9,500 bytes, link addresses included) is refused, and only the
# first 100 entities are applied (tdlib/telegram-bot-api#165, #820).
MAX_ENTITY_BYTES = 9500
MAX_ENTITIES = 100


def _check_entities(text: str, entities: list[dict[str, Any]]) -> None:
    n = utf16_len(text)
    size = sum(16 + len(str(e.get("url") or "").encode()) for e in entities)
    if size > MAX_ENTITY_BYTES:
        raise ApiError(400, "Bad Request: ENTITIES_TOO_LONG")
    for e in entities:
        kind = e.get("type")
        off, length = e.get("offset"), e.get("length")
        if kind not in ENTITY_TYPES:
            raise ApiError(400, "Bad Request: can't parse entities: unsupported entity type")
        if not isinstance(off, int) or not isinstance(length, int) or off < 0 or length <= 0:
            raise ApiError(400, "Bad Request: can't parse entities: wrong entity offset or length")
        if off + length > n:
            raise ApiError(
                400, f"Bad Request: can't parse entities: entity beyond end of text at {off}"
            )
        if kind == "text_link":
            url = str(e.get("url") or "")
            if not url.lower().startswith(("http://", "https://", "tg://", "mailto:")):
                raise ApiError(400, "Bad Request: can't parse entities: wrong HTTP URL")


# Telegram's nesting rules (Bot API, "Formatting options"): bold, italic,
# underline, strikethrough and spoiler can contain and be part of any entity but
# code and pre; blockquotes can't be nested; all other entities can't contain each
# other.  A message that breaks them is not refused: tdlib's fix_entities
# (td/telegram/MessageEntity.cpp) keeps, of the overlapping others, the first in
# its order (offset, the longer first, then get_type_priority below) and drops
# the rest, and cuts the bold/italic/... parts inside code and pre away.
_SPLITTABLE = frozenset({"bold", "italic", "underline", "strikethrough", "spoiler"})
_BLOCKQUOTES = frozenset({"blockquote", "expandable_blockquote"})
_PRIORITY = {"pre": 11, "code": 20, "text_link": 49, "text_mention": 49, "custom_emoji": 99}


def _span(e: dict[str, Any]) -> tuple[int, int]:
    return e["offset"], e["offset"] + e["length"]


def _first_of_each_nest(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tdlib's remove_intersecting_entities: in sorted order, each entity that
    starts inside one kept before it is dropped (nested ones included)."""
    order = sorted(
        entities,
        key=lambda e: (
            e["offset"],
            -e["length"],
            _PRIORITY.get(e["type"], 50) - (e["type"] == "pre" and bool(e.get("language"))),
        ),
    )
    kept, end = [], 0
    for e in order:
        if e["offset"] >= end:
            kept.append(e)
            end = _span(e)[1]
    return kept


def entities_telegram_keeps(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entities a message shows once Telegram has applied its nesting rules,
    in the order given (those it keeps whole are the same objects).

    ``[`x`](url)`` sent as a code and a text_link entity over the same text keeps
    the code only: the link is gone.  Bold over code keeps the code, and the bold
    only outside it.
    """
    quotes = _first_of_each_nest([e for e in entities if e["type"] in _BLOCKQUOTES])
    others = [
        e
        for e in _first_of_each_nest(
            [e for e in entities if e["type"] not in _SPLITTABLE | _BLOCKQUOTES]
        )
        if not any(  # a quote can contain them, not cut through them
            a < _span(e)[1] and _span(e)[0] < b and not (a <= _span(e)[0] and _span(e)[1] <= b)
            for a, b in map(_span, quotes)
        )
    ]
    code = sorted(_span(e) for e in others if e["type"] in ("code", "pre"))
    whole = {id(e) for e in quotes + others}
    out: list[dict[str, Any]] = []
    for e in entities:
        if e["type"] not in _SPLITTABLE:
            out += [e] if id(e) in whole else []
            continue
        start, end = _span(e)
        cuts = [(a, b) for a, b in code if a < end and start < b]
        if not cuts:
            out.append(e)
            continue
        for a, b in [*cuts, (end, end)]:  # the pieces between the code
            if a > start:
                out.append(e | {"offset": start, "length": a - start})
            start = max(start, b)
    return out


def _check_markup(markup: dict[str, Any] | None) -> None:
    if not markup:
        return
    rows = markup.get("inline_keyboard")
    if not isinstance(rows, list):
        raise ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
    for row in rows:
        for b in row:
            data = b.get("callback_data")
            if data is not None and (not data or len(str(data).encode()) > 64):
                raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
            if not b.get("text"):
                raise ApiError(400, "Bad Request: BUTTON_TEXT_INVALID")
