"""Markdown -> Slack mrkdwn, and splitting long text at Slack's limits.

Slack's mrkdwn is not markdown: bold is ``*x*``, italic ``_x_``, strike ``~x~``,
links ``<url|text>``, no headings, no tables, and ``&``, ``<``, ``>`` must be
escaped everywhere (code included).  :func:`to_mrkdwn` parses the text as
CommonMark (plus tables, ``~~strike~~`` and task lists) with pyromark and writes
every element in Slack's syntax: headings become bold lines, list items ``•`` or
``N.``, rules a line, table rows plain ``| a | b |`` lines, code keeps its text
(language tag dropped), raw HTML is shown as literal text, and links are only
made for http(s)/mailto targets, so the text can never produce a mention.  Blank
lines between blocks follow the source; emphasis is closed at each line end and a
zero-width space marks a word boundary Slack needs but the source lacks (``x**y**``),
and breaks every run of 3+ backticks outside code blocks (Slack would open one).
It never raises (on any internal error the text is only escaped: a plain fallback).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pyromark

from channels.graphemes import back_to_boundary
from channels.markdown_source import cjk_emphasis, protect_bare_urls

log = logging.getLogger(__name__)

_OPTIONS = (
    pyromark.Options.ENABLE_TABLES
    | pyromark.Options.ENABLE_STRIKETHROUGH
    | pyromark.Options.ENABLE_TASKLISTS
)
_URL_SCHEME = re.compile(r"(?:https?://|mailto:)[^\s]", re.I)  # the only link targets
_FENCE_RUN = re.compile(r"`{3,}")
_MARKS = {"Strong": "*", "Emphasis": "_", "Strikethrough": "~"}
_RULE = "──────────"
_ZWSP = "\u200b"  # lets Slack see a word boundary next to an emphasis marker


def escape(text: str) -> str:
    """Escape the three characters Slack treats as control sequences."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _no_fence(text: str) -> str:
    """Break each run of 3+ backticks with zero-width spaces: Slack would read a fence."""
    return _FENCE_RUN.sub(lambda m: _ZWSP.join(m.group()), text)


def _code(text: str) -> str:
    """Escaped code; a run of 3+ backticks inside would end Slack's block, so break it."""
    return _no_fence(escape(text))


def _code_span(text: str) -> str:
    """Inline code; a backtick at either end is kept apart from the wrapping ones."""
    code = _code(text)
    return f"`{_ZWSP * code.startswith('`')}{code}{_ZWSP * code.endswith('`')}`"


def _link(url: str, label: str) -> str:
    """``<url|label>`` for an http(s)/mailto URL; any other target is plain text.

    Slack reads ``<!channel|x>``, ``<!here>``, ``<!subteam^…>`` and ``<@U…>`` as
    mentions: a markdown link whose target is not a web or mail address must never
    become one, so it is shown escaped, as ``label (target)``.
    """
    label = " ".join(label.split())
    if not _URL_SCHEME.match(url):
        return escape(f"{label} ({url})" if label and label != url else url)
    target = url
    for ch, enc in (("|", "%7C"), (">", "%3E"), ("<", "%3C"), (" ", "%20"), ("`", "%60")):
        target = target.replace(ch, enc)
    if not label or label == url:
        return f"<{target}>"
    return f"<{target}|{escape(label.replace('|', '¦'))}>"


class _Writer:
    """Turns pyromark's events into mrkdwn lines."""

    def __init__(self, md: str) -> None:
        self.src = md.encode()
        self.lines: list[str] = []
        self.line: list[str] | None = None  # the line being written, prefix included
        self.blank = False  # the source had a blank line before the next block
        self.boxes: list[list[Any]] = []  # open quotes and list items: [marker, shown?]
        self.lists: list[int | None] = []  # next number of each open list (None: bullets)
        self.marks: list[list[Any]] = []  # open emphasis: [marker, written?, ZWSP first?]
        self.depth = dict.fromkeys("*_~", 0)
        self.label: list[str] | None = None  # the text of the link being read
        self.url, self.nested = "", 0  # its target; images nested in its label
        self.code: list[str] | None = None  # the text of the code block being read

    def _word(self, i: int, before: bool) -> bool:
        """Is the source character before (or at) byte ``i`` a letter or digit?"""
        near = (self.src[max(0, i - 4) : i] if before else self.src[i : i + 4]).decode(
            "utf-8", "ignore"
        )
        return (near[-1:] if before else near[:1]).isalnum()

    def _prefix(self, blank: bool) -> str:
        out = ""
        for box in self.boxes:  # a quote marks every line, an item only its first
            shown = box[0] == "> " or not (box[1] or blank)
            out += box[0] if shown else " " * len(box[0])
            box[1] = box[1] or shown
        return out.rstrip() if blank else out

    def raw(self, s: str) -> None:
        if self.line is None:
            if self.blank and self.lines:
                self.lines.append(self._prefix(blank=True))
            self.blank, self.line = False, [self._prefix(blank=False)]
        self.line.append(s)

    def put(self, s: str) -> None:
        """Inline text: first writes the emphasis markers opened before it."""
        if self.label is not None:
            return self.label.append(s)
        for mark in self.marks:
            if not mark[1]:
                self.raw(_ZWSP * mark[2] + mark[0])
                mark[1] = True
        self.raw(s)

    def end_line(self, fence: bool = False) -> None:
        """Ends the line; backticks of text and code spans never form a fence there."""
        if self.line is not None:
            line = "".join(self.line)
            self.lines.append(line if fence else _no_fence(line))
        self.line = None

    def block(self, start: int) -> None:
        """A block starts at byte ``start``: a new line, after a blank one if the source had it."""
        self.end_line()
        nl = self.src.rfind(b"\n", 0, start)
        prev = self.src[self.src.rfind(b"\n", 0, nl) + 1 : nl] if nl >= 0 else b"x"
        self.blank = self.blank or not prev.strip(b" \t>")

    def mark(self, ch: str, zwsp: bool, opening: bool) -> None:
        """Emphasis: Slack needs no nested marker of the same kind, nor an empty pair."""
        self.depth[ch] += 1 if opening else -1
        if self.label is not None or self.depth[ch] != (1 if opening else 0):
            return
        if opening:
            self.marks.append([ch, False, zwsp])
        elif self.marks.pop()[1]:
            self.raw(ch + _ZWSP * zwsp)

    def br(self) -> None:
        """A line break: Slack's emphasis cannot span lines, so close it and reopen."""
        if self.label is not None:
            return self.label.append(" ")
        self.raw("".join(m[0] for m in reversed(self.marks) if m[1]))
        self.end_line()
        for mark in self.marks:
            mark[1] = mark[2] = False

    def event(self, ev: Any, start: int, end: int) -> None:
        match ev:
            case "SoftBreak" | "HardBreak":
                self.br()
            case "Rule":
                self.block(start)
                self.raw(_RULE)
                self.end_line()
            case {"Start": "Strong" | "Emphasis" | "Strikethrough" as tag}:
                self.mark(_MARKS[tag], self._word(start, before=True), opening=True)
            case {"End": "Strong" | "Emphasis" | "Strikethrough" as tag}:
                self.mark(_MARKS[tag], self._word(end, before=False), opening=False)
            case {"Start": {"Link": link} | {"Image": link}}:
                if self.label is not None:
                    self.nested += 1
                else:
                    email = link["link_type"] == "Email"
                    self.label, self.url = [], "mailto:" * email + link["dest_url"]
            case {"End": "Link" | "Image"}:
                if self.nested:
                    self.nested -= 1
                elif self.label is not None:
                    label, self.label = "".join(self.label), None
                    self.put(_link(self.url, label))
            case {"Start": "TableCell"}:
                self.raw("| " if self.line is None else " | ")
            case {"End": "TableHead" | "TableRow"}:
                self.raw(" |")
                self.end_line()
            case {"Start": "TableHead" | "TableRow"} | {"End": "TableCell"}:
                pass
            case {"Start": tag}:
                self.block(start)
                name = next(iter(tag)) if isinstance(tag, dict) else tag
                if name == "Heading":
                    self.mark("*", False, opening=True)
                elif name == "CodeBlock":
                    self.code = []
                elif name == "BlockQuote":
                    self.boxes.append(["> ", True])
                elif name == "List":
                    self.lists.append(tag["List"])
                elif name == "Item":
                    n = self.lists[-1]
                    self.boxes.append(["• " if n is None else f"{n}. ", False])
                    self.lists[-1] = None if n is None else n + 1
            case {"End": tag}:
                name = next(iter(tag)) if isinstance(tag, dict) else tag
                if name == "Heading":
                    self.mark("*", False, opening=False)
                elif name == "CodeBlock":
                    text, self.code = "".join(self.code or []), None
                    self.raw("```")
                    self.end_line(fence=True)
                    # The code lines carry only the quotes' "> ", not a list item's
                    # indentation: code copied from a step must run as written.
                    quotes = "".join(box[0] for box in self.boxes if box[0] == "> ")
                    for line in _code(text.removesuffix("\n")).split("\n"):
                        self.lines.append(quotes + line)
                    self.raw("```")
                    self.end_line(fence=True)
                self.end_line()
                if name in ("BlockQuote", "Item"):
                    self.boxes.pop()
                elif name == "List":
                    self.lists.pop()
            case {"TaskListMarker": done}:
                self.put("☑ " if done else "☐ ")
            case {"Text": text} if self.code is not None:
                self.code.append(text)
            case {"Html": html}:  # a line of an HTML block: shown as the text it is
                for part in html.removesuffix("\n").split("\n"):
                    self.raw(escape(part))
                    self.end_line()
            case {"Code": code} if self.label is None:
                self.put(_code_span(code))
            case {"Text": text} | {"Code": text} | {"InlineHtml": text}:
                self.put(text if self.label is not None else escape(text))


def _convert(md: str) -> str:
    md = md.replace("\r\n", "\n").replace("\r", "\n")
    md = cjk_emphasis(protect_bare_urls(md, _OPTIONS), _OPTIONS)
    writer = _Writer(md)
    for ev, rng in pyromark.events_with_range(md, options=_OPTIONS, merge_text=True):
        writer.event(ev, rng["start"], rng["end"])
    writer.end_line()
    return "\n".join(writer.lines)


def to_mrkdwn(md: str) -> str:
    """Render markdown as Slack mrkdwn; on any failure, the escaped plain text."""
    try:
        return _convert(md)
    except BaseException as exc:  # a renderer bug must never lose the answer
        if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
            raise  # KeyboardInterrupt and the like; a Rust panic is a renderer bug
        log.warning("mrkdwn conversion failed; sending plain text", exc_info=True)
        return escape(md)


def _outside_token(text: str, cut: int, floor: int) -> int:
    """Move ``cut`` back before an unfinished ``<link>`` or ``&entity;`` (not down to ``floor``)."""
    lt = text.rfind("<", 0, cut)
    if lt > floor and text.rfind(">", 0, cut) < lt and text.find(">", cut) >= 0:
        cut = lt
    amp = text.rfind("&", max(0, cut - 4), cut)
    if amp > floor and ";" not in text[amp:cut]:
        cut = amp
    run = cut - len(text[:cut].rstrip("`"))  # nor inside a run of backticks
    if run and text[cut : cut + 1] == "`" and cut - run > floor:
        cut -= run
    return cut


def _blank(ch: str) -> bool:
    return not ch or ch.isspace() or ch == _ZWSP


def _opens(line: str, i: int) -> bool:
    """Does ``line[i]`` open inline code or emphasis (when no code is open)?"""
    if line[i] == "`":
        return line.find("`", i + 1) > i
    return line[i] in "*_~" and not line[i - 1 : i].isalnum() and not _blank(line[i + 1 : i + 2])


def _closes(line: str, i: int, code: bool) -> bool:
    """Can ``line[i]`` close an open construct of its kind (in code: only a backtick)?"""
    if code or line[i] == "`":
        return code and line[i] == "`"
    return line[i] in "*_~" and not _blank(line[i - 1 : i]) and not line[i + 1 : i + 2].isalnum()


def _span(line: str, at: int) -> tuple[int, int] | None:
    """(start, end) of the outermost inline code or emphasis of ``line`` around ``at``.

    Read as Slack does: a backtick opens code when another follows on the line;
    ``*``, ``_``, ``~`` open after a non-word character and before a non-space, and
    close an open one after a non-space and before a non-word character; a
    ``<link>`` is skipped whole.  None when no construct is open at ``at``.
    """
    stack: list[tuple[int, str]] = []  # open constructs: (start, marker)
    depth = -1  # how many of them were open at ``at`` and still are (-1: not there yet)
    found = None
    i = 0
    while i < len(line) and depth:
        if depth < 0 and i >= at:
            depth = len(stack)
            continue
        ch, code = line[i], bool(stack) and stack[-1][1] == "`"
        if _closes(line, i, code) and any(m == ch for _, m in stack):
            while stack[-1][1] != ch:
                stack.pop()
            start = stack.pop()[0]
            if len(stack) < depth:  # open at ``at``: each later one is further out
                found = (start, i + 1)
                depth = len(stack)
        elif code:
            pass
        elif _opens(line, i):
            stack.append((i, ch))
        elif ch == "<" and line.find(">", i) > i:
            i = line.find(">", i)
        i += 1
    return found


def _has_text(piece: str) -> bool:
    """More than a code fence split_text reopened: a cut there makes progress."""
    return bool(piece.replace("```", "").strip())


def _before_span(text: str, cut: int, limit: int) -> int:
    """Move ``cut`` before the inline code or emphasis it would split (to a space if any).

    Kept when that construct is longer than ``limit`` or starts the text.
    """
    if text.count("```", 0, cut) % 2:  # in a code block: split_text closes and reopens it
        return cut
    start = text.rfind("\n", 0, cut) + 1
    end = text.find("\n", cut)
    found = _span(text[start : len(text) if end < 0 else end], cut - start)
    if found is None:
        return cut
    span, close = start + found[0], start + found[1]
    space = max(text.rfind(" ", 0, span), text.rfind("\n", 0, span)) + 1
    new = space if _has_text(text[:space]) else len(text[:span].rstrip("`"))
    return new if _has_text(text[:new]) and close - new <= limit else cut


def _outside(text: str, cut: int, limit: int) -> int:
    """Move ``cut`` back out of a token (link, entity, backticks) or an inline span."""
    while True:
        new = _before_span(text, _outside_token(text, cut, limit // 3), limit)
        if new == cut:
            return cut
        cut = new


def _cut_point(text: str, limit: int) -> int:
    """Best index <= limit to cut at: paragraph, line, sentence/word, else hard."""
    window = text[:limit]
    for sep in ("\n\n", "\n", " "):
        i = window.rfind(sep)
        if i >= limit // 3:
            return _outside(text, i + len(sep), limit)
    return _outside(text, back_to_boundary(text, limit, 0), limit)  # whole characters


def split_text(text: str, limit: int) -> list[str]:
    """Split mrkdwn into pieces of at most ``limit`` characters.

    Cuts on paragraph, line or word boundaries, never inside a ``<link>``, an
    ``&amp;``-style escape, inline code or emphasis on one line (unless one alone
    is longer than a piece, or for code or emphasis, starts the text); a code block
    that has to be cut is closed at the end of one piece and reopened at the start
    of the next.
    """
    if limit < 16:
        raise ValueError("limit too small")
    pieces: list[str] = []
    rest = text
    reopen = False
    while rest:
        if reopen:
            rest = "```\n" + rest
        if len(rest) <= limit:
            pieces.append(rest)
            break
        cut = _cut_point(rest, limit - 4)  # room to close an open code block
        piece, rest = rest[:cut], rest[cut:]
        if not piece.strip():
            piece, rest = rest[: limit - 4], rest[limit - 4 :]
        reopen = piece.count("```") % 2 == 1
        if reopen:
            piece = piece.rstrip("\n") + "\n```"
            if rest.startswith("\n"):
                rest = rest[1:]
        pieces.append(piece.rstrip() if not reopen else piece)
        if reopen and not rest.strip():
            break
    return [p for p in pieces if p.strip()] or ([text[:limit]] if text else [])
