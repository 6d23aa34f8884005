"""OutboundMessage -> Discord message payloads (pure).

Discord renders most markdown natively (bold, italics, code, fenced blocks,
quotes, ``#``/``##``/``###`` headings, lists, masked links).  What it lacks is
adapted: deeper headings become bold, tables go into a code block, images
become links, rules become a line.  Text is split at 2,000 characters on
paragraph / line / word boundaries; a code block cut in two is closed at the
end of one part and reopened (same language) at the start of the next; a
block left open (a streaming preview) is closed, and a word cut is never made
inside inline code, emphasis or a masked link.

Every payload carries ``allowed_mentions: {"parse": []}``: whatever the LLM
writes, the bot can never ping @everyone, a role or a user.

Buttons become components whose ``custom_id`` is ``parley:<payload>``; the
gateway registers a persistent dynamic item matching that template, so a
press works after any restart.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from agent_core.events import Button, ButtonStyle, MessageRef, OutboundMessage
from channels.graphemes import back_to_boundary

log = logging.getLogger(__name__)

LIMIT = 2000
CUSTOM_ID_PREFIX = "parley:"
# A persistent DynamicItem template: the payload is any ASCII (Button guarantees
# <= 64 bytes), so custom_id stays <= 71 of Discord's 100 characters.
CUSTOM_ID_TEMPLATE = r"parley:(?P<payload>[\x00-\x7f]{1,64})"
NO_MENTIONS: dict[str, Any] = {"parse": [], "replied_user": False}
EMPTY = "\u200b"  # Discord refuses empty content; a zero-width space is invisible

# Discord button styles: 1 primary (blurple), 2 secondary (grey), 3 success (green), 4 danger (red)
# The core marks Approve primary, Always secondary, Deny danger: primary is shown
# as Discord's green "success" style.
_STYLE = {ButtonStyle.PRIMARY: 3, ButtonStyle.SECONDARY: 2, ButtonStyle.DANGER: 4}

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_DEEP_HEADING = re.compile(r"^\s{0,3}#{4,6}\s+(.+?)(?:\s+#+)?\s*$")
# An address may hold one level of balanced parentheses (Wikipedia's Foo_(bar)), in
# images and masked links alike; a '(' opens a group that must close before the next.
_IMAGE = re.compile(r"!\[([^\]]*)\]\(((?:[^()\s]|\([^()\s]*\))+)[^)]*\)")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_UNDERSCORE_BOLD = re.compile(r"(?<![\w_])__(?=\S)(.+?)(?<=\S)__(?![\w_])")
_CODE_SPAN = re.compile(r"(`+).+?\1")
_MASKED_LINK = re.compile(r"\[[^[\]\n]*\]\((?:[^()\s]|\([^()\s]*\))*\)")
# Bold, italics, strike, spoiler: a close-enough match (a false one only moves a cut).
_EMPHASIS = re.compile(r"\*\*[^*\n]+\*\*|\*[^*\n]+\*|__[^_\n]+__|~~[^~\n]+~~|\|\|[^|\n]+\|\|")
_URL = re.compile(r"\S+://\S+")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
# A table's separator row: |---|:--:|  (a lone ||42|| line is a spoiler, not a table)
_TABLE_SEPARATOR = re.compile(r"^\s*\|?(\s*:?-+:?\s*\|)+\s*(:?-+:?\s*)?\|?\s*$")


def custom_id(payload: str) -> str:
    return CUSTOM_ID_PREFIX + payload


def button_style(button: Button) -> int:
    """Approve (primary) -> success (green), Always -> secondary, Deny -> danger (red)."""
    return _STYLE.get(button.style, 2)


def components(buttons: tuple[Button, ...]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for start in range(0, min(len(buttons), 25), 5):
        rows.append(
            {
                "type": 1,
                "components": [
                    {
                        "type": 2,
                        "style": button_style(b),
                        "label": (b.label or "?")[:80],
                        "custom_id": custom_id(b.payload),
                    }
                    for b in buttons[start : start + 5]
                ],
            }
        )
    return rows


# --- markdown -------------------------------------------------------------


def _fence(line: str) -> tuple[str, str, str] | None:
    """(marker, info, indent) if ``line`` is a code fence, else None.

    Any indentation: a fence in a list item (``10.``, nested bullets) sits 4+ spaces
    in, and Discord, which has no indented code blocks, shows every ``` as a fence."""
    m = _FENCE.match(line)
    if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
        return None
    return m.group(2), m.group(3).strip(), m.group(1)


def _closes(line: str, opener: tuple[str, str, str]) -> bool:
    """Whether ``line`` closes the block ``opener`` began (same kind, at least as long,
    no info string, indented at most 3 more: CommonMark's rule inside a list item)."""
    f = _fence(line)
    marker, indent = opener[0], len(opener[2].expandtabs(4))
    return (
        f is not None
        and f[0][0] == marker[0]
        and len(f[0]) >= len(marker)
        and not f[1]
        and len(f[2].expandtabs(4)) <= indent + 3
    )


def _bold_underscores(line: str) -> str:
    """``__x__`` means bold in markdown but underline on Discord: make it ``**x**``
    (not inside inline code or a URL)."""
    if "__" not in line:
        return line
    keep = [(m.start(), m.end()) for m in (*_CODE_SPAN.finditer(line), *_URL.finditer(line))]

    def swap(m: re.Match[str]) -> str:
        if any(a < m.end() and m.start() < b for a, b in keep):
            return m.group(0)
        return f"**{m.group(1)}**"

    return _UNDERSCORE_BOLD.sub(swap, line)


def to_discord_markdown(text: str) -> str:
    """Adapt common markdown to what Discord shows.  Code blocks keep their
    content; ``~~~`` and longer fences become ``` (Discord knows no other)."""
    out: list[str] = []
    table: list[str] = []
    lines = text.split("\n")

    def flush_table() -> None:
        if table:
            out.append("```")
            out.extend(table)
            out.append("```")
            table.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        f = _fence(line)
        if f is not None:
            flush_table()
            body: list[str] = []
            while i < len(lines) and not _closes(lines[i], f):
                body.append(lines[i])
                i += 1
            i += 1
            # Discord knows only ``` blocks, closed by the next ``` anywhere: every
            # block becomes one, and a ``` inside it gets an invisible break.  A block
            # not closed yet (a streaming preview, a model stopping mid-block) is
            # closed here, or Discord would show the fence as text.
            body = [b.replace("```", "``\u200b`") for b in body]
            out.extend([f[2] + "```" + f[1], *body, f[2] + "```"])
            continue
        # a table: rows in |...| after a header row and its separator row (|---|)
        if _TABLE_ROW.match(line) and (
            table or (i < len(lines) and _TABLE_SEPARATOR.match(lines[i]) is not None)
        ):
            table.append(line.strip().replace("```", "``\u200b`"))  # it goes in a code block
            continue
        flush_table()
        m = _DEEP_HEADING.match(line)
        if m:
            out.append(f"**{m.group(1).replace('**', '')}**")
            continue
        if _RULE.match(line):
            out.append("──────────")
            continue
        line = _IMAGE.sub(lambda im: f"[{im.group(1) or 'image'}]({im.group(2)})", line)
        out.append(_bold_underscores(line))
    flush_table()
    return "\n".join(out)


# --- splitting ------------------------------------------------------------


def _inline_spans(line: str) -> list[tuple[int, int]]:
    """Where inline code, emphasis and masked links lie in ``line``."""
    return [
        (m.start(), m.end())
        for rx in (_CODE_SPAN, _MASKED_LINK, _EMPHASIS)
        for m in rx.finditer(line)
    ]


def _word_cut(line: str, width: int) -> int:
    """The last space before ``width`` (-1 if none past ``width // 2``), moved before
    an inline code span, emphasis or masked link it would cut in two, unless that
    construct is itself longer than ``width``."""
    cut = first = line.rfind(" ", width // 2, width)
    if cut <= 0:
        return cut
    spans = [(a, b) for a, b in _inline_spans(line[: 2 * width]) if b - a <= width]
    while inside := [a for a, b in spans if a < cut < b]:
        cut = line.rfind(" ", 0, min(inside))
        if cut <= 0:
            return first
    return cut


def _split_line(line: str, width: int, *, code: bool = False) -> list[str]:
    """Cut a line longer than ``width`` at spaces (hard if none).  In code the
    space stays at the end of the first piece: nothing of the code is lost."""
    if len(line) <= width:
        return [line]
    pieces: list[str] = []
    while len(line) > width:
        cut = line.rfind(" ", width // 2, width - 1) if code else _word_cut(line, width)
        if cut <= 0:  # no space: a hard cut, between two whole characters
            hard = back_to_boundary(line, width, 0)
            pieces.append(line[:hard])
            line = line[hard:]
        elif code:
            pieces.append(line[: cut + 1])
            line = line[cut + 1 :]
        else:
            pieces.append(line[:cut])
            line = line[cut + 1 :]
    pieces.append(line)
    return pieces


def split_text(text: str, limit: int = LIMIT) -> list[str]:
    """Split into parts of at most ``limit`` characters, code blocks kept whole-looking."""
    if len(text) <= limit:
        return [text]
    # Fence state per line, as Discord reads it (any ``` line opens or closes;
    # to_discord_markdown leaves no other kind): open_before[i] is the opener line
    # in force before line i, None outside code.
    lines: list[str] = []
    open_before: list[str | None] = []
    fence: str | None = None
    for raw in text.split("\n"):
        f = _fence(raw)
        if f is not None and f[0][0] == "`":
            if len(raw) > limit // 2:  # an info string no message could hold (the
                raw = f[2] + f[0] + f[1][:20]  # language word is all Discord reads)
            lines.append(raw)
            open_before.append(fence)
            fence = None if fence is not None else "```" + f[1][:20]
            continue
        width = limit - len(fence) - 5 if fence else limit  # the fences around it
        for piece in _split_line(raw, width, code=fence is not None):
            lines.append(piece)
            open_before.append(fence)
    open_before.append(fence)

    parts: list[str] = []
    n = len(lines)
    i = 0
    while i < n:
        opener = open_before[i]
        prefix = (opener + "\n") if opener else ""
        size = len(prefix)
        j = i
        best: int | None = None  # a paragraph break outside code
        best_size = 0
        while j < n:
            add = len(lines[j]) + (1 if j > i else 0)
            suffix = 4 if open_before[j + 1] else 0
            if size + add + suffix > limit:
                break
            size += add
            j += 1
            if j < n and not lines[j - 1].strip() and not open_before[j]:
                best, best_size = j, size
        if j == i:  # cannot happen (lines fit by construction); stay safe
            j = i + 1
        end = j
        if j < n and best is not None and best_size >= limit // 2:
            end = best
        elif j < n and open_before[j] and not open_before[i]:
            # prefer cutting just before the code block when enough text precedes it
            k = j
            while k > i and open_before[k]:
                k -= 1
            if k > i and sum(len(x) + 1 for x in lines[i:k]) >= limit // 2:
                end = k
        if end < n and end - 1 > i and open_before[end] and not open_before[end - 1]:
            end -= 1  # never end a part right after an opening fence (an empty block)
        body = "\n".join(lines[i:end])
        part = prefix + body + ("\n```" if open_before[end] else "")
        if part.strip():
            parts.append(part.rstrip("\n") if not open_before[end] else part)
        i = end
        while i < n and not lines[i].strip() and not open_before[i]:
            i += 1
    return parts or [text[:limit]]


def render_text(text: str) -> list[str]:
    """Markdown -> Discord parts; falls back to plain splitting, never raises."""
    try:
        parts = split_text(to_discord_markdown(text))
    except Exception:  # a renderer bug must not lose the answer
        log.exception("discord markdown rendering failed; sending plain text")
        parts = [text[k : k + LIMIT] for k in range(0, len(text), LIMIT)] or [""]
    return [p if p.strip() else EMPTY for p in parts]


def render(message: OutboundMessage) -> list[dict[str, Any]]:
    """The JSON bodies of POST/PATCH /channels/{id}/messages, in order.

    Buttons ride on the last part; an edit without buttons sends an empty
    component list, which removes the old buttons.
    """
    text = message.text
    if message.notice and text.strip():
        text = "\n".join(f"-# {ln}" if ln.strip() else ln for ln in text.split("\n"))
    parts = render_text(text)
    payloads: list[dict[str, Any]] = []
    for k, part in enumerate(parts):
        last = k == len(parts) - 1
        payloads.append(
            {
                "content": part,
                "allowed_mentions": NO_MENTIONS,
                "components": components(message.buttons) if last else [],
            }
        )
    return payloads


# --- MessageRef.extra -----------------------------------------------------
# "p=<id>,<id>"         ids of continuation parts after message_id (long answers)
# "i=<app id>/<token>"  an interaction to answer privately (button presses, slash commands)
# "u=<user id>"         who invoked that interaction (slash commands: only they see
#                       an ephemeral follow-up, so a private notice goes there only for them)
# joined with ";"


def encode_extra(
    parts: list[str] | None = None,
    interaction: tuple[str, str] | None = None,
    invoker: str = "",
    *,
    preview: bool = False,
) -> str:
    """A ref's ``extra``: the answer's further messages, the interaction it answers,
    who invoked it, and whether it is a streamed preview (an answer still being
    written: a deleted preview is posted anew by the next edit, see the sender)."""
    items = []
    if parts:
        items.append("p=" + ",".join(parts))
    if interaction:
        items.append(f"i={interaction[0]}/{interaction[1]}")
    if invoker:
        items.append(f"u={invoker}")
    if preview:
        items.append("s=1")
    return ";".join(items)


def decode_preview(extra: str) -> bool:
    """The ref is of a streamed preview (see :func:`encode_extra`)."""
    return "s=1" in extra.split(";")


def decode_invoker(extra: str) -> str:
    """The user who invoked the interaction in ``extra`` ("" if not recorded)."""
    return next((item[2:] for item in extra.split(";") if item.startswith("u=")), "")


def decode_extra(extra: str) -> tuple[list[str], tuple[str, str] | None]:
    parts: list[str] = []
    interaction: tuple[str, str] | None = None
    for item in extra.split(";"):
        if item.startswith("p="):
            parts = [p for p in item[2:].split(",") if p]
        elif item.startswith("i=") and "/" in item:
            app, token = item[2:].split("/", 1)
            interaction = (app, token)
    return parts, interaction


def message_ids(ref: MessageRef) -> list[str]:
    return [ref.message_id, *decode_extra(ref.extra)[0]]
