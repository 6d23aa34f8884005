"""Markdown -> Slack mrkdwn, and splitting long text at Slack's limits.

Slack's mrkdwn is not markdown: bold is ``*x*``, italic ``_x_``, strike ``~x~``,
links ``<url|text>``, no headings, no tables, and ``&``, ``<``, ``>`` must be
escaped everywhere (code included).  :func:`to_mrkdwn` converts the common
subset line by line, leaving code untouched apart from escaping; it never
raises (on any internal error the text is only escaped: a plain fallback).
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_LINK = re.compile(r"\[([^\]\n]+)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<(https?://[^\s>]+)>")
_URL_SCHEME = re.compile(r"(?:https?://|mailto:)[^\s]", re.I)  # the only link targets
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC_STAR = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(\[[ xX]\]\s+)?(.*)$")
_HRULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")

# Private-use placeholders protect finished pieces from later substitutions.
_PH = "\ue000{}\ue001"
_PH_RE = re.compile("\ue000(\\d+)\ue001")


def escape(text: str) -> str:
    """Escape the three characters Slack treats as control sequences."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _inline(line: str) -> str:
    saved: list[str] = []

    def keep(s: str) -> str:
        saved.append(s)
        return _PH.format(len(saved) - 1)

    line = line.replace("\ue000", "").replace("\ue001", "")
    line = _INLINE_CODE.sub(lambda m: keep("`" + escape(m.group(2)) + "`"), line)
    line = _IMAGE.sub(lambda m: keep(_link(m.group(2), m.group(1) or m.group(2))), line)
    line = _LINK.sub(lambda m: keep(_link(m.group(2), m.group(1))), line)
    line = _AUTOLINK.sub(lambda m: keep(_link(m.group(1), "")), line)
    line = escape(line)
    line = _BOLD.sub(lambda m: keep("*" + m.group(2) + "*"), line)
    line = _ITALIC_STAR.sub(lambda m: "_" + m.group(1) + "_", line)
    line = _STRIKE.sub(lambda m: "~" + m.group(1) + "~", line)
    # Placeholders may nest (a link inside bold): resolve until none are left.
    for _ in range(4):
        if "\ue000" not in line:
            break
        line = _PH_RE.sub(lambda m: saved[int(m.group(1))], line)
    return line


def _link(url: str, label: str) -> str:
    """``<url|label>`` for an http(s)/mailto URL; any other target is plain text.

    Slack reads ``<!channel|x>``, ``<!here>``, ``<!subteam^…>`` and ``<@U…>`` as
    mentions: a markdown link whose target is not a web or mail address must never
    become one, so it is shown escaped, as ``label (target)``.
    """
    if not _URL_SCHEME.match(url):
        label = label.strip()
        shown = f"{label} ({url})" if label and label != url else url
        return escape(shown)
    url = url.replace("|", "%7C").replace(">", "%3E").replace("<", "%3C")
    label = escape(label.replace("|", "¦").replace("*", "").replace("_", " ").strip())
    return f"<{url}|{label}>" if label and label != url else f"<{url}>"


def _convert(md: str) -> str:
    out: list[str] = []
    in_code = False
    fence = ""
    for raw in md.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        m = _FENCE.match(raw)
        if in_code:
            if m and m.group(1) == fence and raw.strip() == fence:
                out.append("```")
                in_code = False
            else:
                out.append(escape(raw))
            continue
        if m:
            in_code, fence = True, m.group(1)
            out.append("```")
            rest = raw.strip()[3:]
            # ```python -> the language tag is dropped (Slack has no highlighting)
            if rest.endswith(fence) and len(rest) >= 3:
                out[-1] = "```" + escape(rest[:-3]) + "```"
                in_code = False
            continue
        if _TABLE_SEP.match(raw) and "-" in raw:
            continue
        h = _HEADING.match(raw)
        if h:
            out.append("*" + _inline(h.group(1)).strip("*") + "*" if h.group(1) else "")
            continue
        if _HRULE.match(raw):
            out.append("──────────")
            continue
        b = _BULLET.match(raw)
        if b:
            indent = " " * (len(b.group(1).expandtabs(4)) // 2 * 2)
            box = ""
            if b.group(2):
                box = "☑ " if b.group(2).strip()[1] in "xX" else "☐ "
            out.append(f"{indent}• {box}{_inline(b.group(3))}")
            continue
        quote = re.match(r"^\s{0,3}>\s?(.*)$", raw)
        if quote:
            out.append("> " + _inline(quote.group(1)))
            continue
        out.append(_inline(raw))
    if in_code:
        out.append("```")
    return "\n".join(out)


def to_mrkdwn(md: str) -> str:
    """Render markdown as Slack mrkdwn; on any failure, the escaped plain text."""
    try:
        return _convert(md)
    except Exception:  # a renderer bug must never lose the answer
        log.warning("mrkdwn conversion failed; sending plain text", exc_info=True)
        return escape(md)


def _cut_point(text: str, limit: int) -> int:
    """Best index <= limit to cut at: paragraph, line, sentence/word, else hard."""
    window = text[:limit]
    for sep in ("\n\n", "\n"):
        i = window.rfind(sep)
        if i >= limit // 3:
            return i + len(sep)
    i = window.rfind(" ")
    if i >= limit // 3:
        return i + 1
    # Avoid cutting an escape sequence like &amp; in half.
    amp = window.rfind("&", max(0, limit - 5))
    if amp > 0 and ";" not in window[amp:]:
        return amp
    return limit


def split_text(text: str, limit: int) -> list[str]:
    """Split mrkdwn into pieces of at most ``limit`` characters.

    Cuts on paragraph, line or word boundaries; a code block that has to be cut
    is closed at the end of one piece and reopened at the start of the next.
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
