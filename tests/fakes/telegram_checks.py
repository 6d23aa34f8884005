"""What the fake Bot API checks in a request before carrying it out: text
length in UTF-16 units, MarkdownV2, entities and their undocumented size limits,
inline keyboards.  Errors are :class:`ApiError`, answered as Telegram answers."""

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
