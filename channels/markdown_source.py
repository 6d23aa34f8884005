"""Rewrites of a model's Markdown source before a platform's converter parses it.

Telegram's and Slack's renderers parse the answer as CommonMark (pyromark), where
some things a model writes come out differently from what it meant, and from what
Discord and the web chat show:

* :func:`protect_bare_urls`: CommonMark has no bare-URL links, so the ``__`` of
  ``…/pkg/__init__.py`` or the ``*`` of ``?q=*foo*`` would become emphasis and
  vanish from the address.
* :func:`cjk_emphasis`: ``**注意：**请先备份`` stays literal (a closing ``**``
  after punctuation and before a letter closes nothing under the flanking rules,
  and Chinese and Japanese put no space there); the punctuation is moved across
  the delimiter so it closes: ``**注意**：请先备份``.

Both take the parser options of the converter that reads the result (positions
come from the parser itself, so code spans and blocks are never touched), never
raise on text the parser reads, and return the text unchanged when there is
nothing to do.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import pairwise

import pyromark
import regex

_BARE_URL = re.compile(rb"(?:https?://|mailto:)[^\s<>\[\]]+", re.I)


def protect_bare_urls(md: str, options: pyromark.Options) -> str:
    """Backslash-escape ``_*~`` inside bare URLs so they are not read as emphasis.

    CommonMark has no bare-URL links: ``…/pkg/__init__.py`` would lose its
    underscores to bold.  Code, raw HTML and ``<autolinks>`` (where a backslash
    stays literal) are left alone; in a link's label or target it is harmless.
    """
    src = md.encode()
    urls = [m for m in _BARE_URL.finditer(src) if re.search(rb"[_*~]", m.group())]
    if not urls:
        return md
    skip: list[tuple[int, int]] = []
    for ev, rng in pyromark.events_with_range(md, options=options):
        match ev:
            case (
                {"Code": _}
                | {"InlineHtml": _}
                | {
                    "Start": "HtmlBlock"
                    | {"CodeBlock": _}
                    | {"Link": {"link_type": "Autolink" | "Email"}}
                }
            ):
                skip.append((rng["start"], rng["end"]))
    at: list[int] = []
    for m in urls:
        if any(a < m.end() and m.start() < b for a, b in skip):
            continue
        url = m.group()  # without trailing punctuation or an unbalanced ')', as GitHub does
        while url and (
            url[-1:] in b"?!.,:;*_~'\"" or (url[-1:] == b")" and url.count(b")") > url.count(b"("))
        ):
            url = url[:-1]
        at += [m.start() + i for i, c in enumerate(url) if c in b"_*~" and url[i - 1 : i] != b"\\"]
    return b"\\".join(src[a:b] for a, b in pairwise([0, *sorted(at), len(src)])).decode()


# Chinese, Japanese and Korean letters (and the kana length mark, a modifier letter)
_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u30fc]")  # one letter
_DELIMITERS = re.compile(rb"\*{1,2}|_{2}")  # the runs looked at: *, ** and __
_CJK_CLASS = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u30fc"
# a delimiter between punctuation and a CJK letter, either way round: a candidate
_TOUCHING = regex.compile(
    rf"[\p{{P}}\p{{S}}](?:\*{{1,2}}|__)[{_CJK_CLASS}]|[{_CJK_CLASS}](?:\*{{1,2}}|__)[\p{{P}}\p{{S}}]"
)
_SYNTAX = frozenset("\\`*_~[]<>!|$&")  # Markdown's own characters: never moved
_MAX_TRIES = 64  # each candidate pair is checked by parsing the text again
_Run = tuple[int, int]  # a delimiter run's byte range
_Span = tuple[str, int, int]  # an emphasis: Strong or Emphasis, and its byte range


def _is_punct(ch: str) -> bool:
    """CommonMark's Unicode punctuation (0.31): general category P or S."""
    return bool(ch) and unicodedata.category(ch)[0] in "PS"


def _is_quote(ch: str) -> bool:
    """A bracket or quotation mark: moved only together with its other half."""
    return bool(ch) and (ch in "\"'" or unicodedata.category(ch) in ("Ps", "Pe", "Pi", "Pf"))


# the halves of the brackets and quotation marks that move together
_PAIRED = dict(zip("“‘「『（(《〈【〔［｛«〖\"'", "”’」』）)》〉】〕］｝»〗\"'", strict=True))


def _before(src: bytes, pos: int) -> tuple[str, int]:
    """The character ending at byte ``pos`` and where it starts ("" at the start)."""
    start = pos - 1
    while start > 0 and 0x80 <= src[start] < 0xC0:  # a UTF-8 continuation byte
        start -= 1
    if start < 0:
        return "", pos
    return src[start:pos].decode("utf-8", "replace"), start


def _after(src: bytes, pos: int) -> tuple[str, int]:
    """The character starting at byte ``pos`` and where it ends ("" at the end)."""
    ch = src[pos : pos + 4].decode("utf-8", "ignore")[:1]
    return ch, pos + len(ch.encode())


def _parse(
    src: bytes, options: pyromark.Options
) -> tuple[dict[_Run, tuple[int, ...]], set[_Span], list[str]]:
    """What the parser makes of ``src``: the delimiter runs (``*``, ``**``,
    ``__``) it left as text, each with the containers it sits in (two runs can
    only pair in the same one); the byte ranges of its emphasis; and the shape of
    everything else (event kinds, emphasis and text left out).

    A run inside code, an autolink or raw HTML is not such text, nor one next
    to a backslash or to more of its character."""
    literal: dict[int, tuple[int, ...]] = {}
    emphasis: set[_Span] = set()
    shape: list[str] = []
    stack: list[int] = []  # the open blocks and inline containers, by event number
    autolink = 0
    for n, (ev, rng) in enumerate(pyromark.events_with_range(src.decode(), options=options)):
        if not isinstance(ev, dict):
            shape.append(str(ev))
            continue
        start, end = ev.get("Start"), ev.get("End")
        if start in ("Strong", "Emphasis"):
            emphasis.add((start, rng["start"], rng["end"]))
        elif end in ("Strong", "Emphasis"):
            pass
        elif "Text" in ev:
            if not autolink:
                literal.update(
                    (i, tuple(stack)) for i in range(rng["start"], rng["end"]) if src[i] in b"*_"
                )
            continue
        else:
            shape.append(str(ev))
        if start is not None:
            stack.append(n)
            link = start.get("Link") if isinstance(start, dict) else None
            autolink += bool(link and link.get("link_type") in ("Autolink", "Email"))
        elif end is not None:
            if stack:
                stack.pop()
            autolink -= bool(end == "Link" and autolink)
    runs: dict[_Run, tuple[int, ...]] = {}
    for m in _DELIMITERS.finditer(src):
        a, b = m.span()
        ch = src[a : a + 1]
        whole = src[a - 1 : a] not in (ch, b"\\") and src[b : b + 1] != ch
        if whole and all(i in literal for i in range(a, b)) and literal[a] == literal[b - 1]:
            runs[(a, b)] = literal[a]
    return runs, emphasis, shape


_Edit = tuple[int, int, bytes]  # replace src[start:end] with these bytes


def _move(src: bytes, opener: _Run, closer: _Run) -> tuple[list[_Edit], _Span] | None:
    """The edits that move the punctuation keeping ``opener`` and ``closer`` from
    pairing across them, and the emphasis the pair then makes; None when that
    is not a case for it.  The edits swap bytes in place: every other position
    stays where it was.

    A closer after punctuation and before a CJK letter (``注意：**请``) gets the
    punctuation after it (``注意**：请``), an opener after a CJK letter and before
    punctuation (``是**“重``) before it (``是“**重``).  A bracket or quotation mark
    moves only with its other half on the other side (``**“重点”**`` ->
    ``“**重点**”``), so neither half is left inside the emphasis alone.  The pair
    must be on one line.
    """
    q, q_end = _after(src, opener[1])  # what follows the opener
    p, p_start = _before(src, closer[0])  # what precedes the closer
    move_open = _is_punct(q) and bool(_CJK.match(_before(src, opener[0])[0]))
    move_close = _is_punct(p) and bool(_CJK.match(_after(src, closer[1])[0]))
    if (move_open and _is_quote(q)) or (move_close and _is_quote(p)):
        if _PAIRED.get(q) != p:
            return None
        move_open = move_close = True
    if (
        not (move_open or move_close)
        or (move_open and q in _SYNTAX)
        or (move_close and p in _SYNTAX)
    ):
        return None
    first = q_end if move_open else opener[1]  # the emphasis's text, after the moves
    last = p_start if move_close else closer[0]
    inner = src[first:last].decode("utf-8", "ignore")
    if not inner.strip() or inner[0].isspace() or inner[-1].isspace() or "\n" in inner:
        return None  # emphasis of nothing, or over a line break: not what this is for
    edits: list[_Edit] = []
    if move_open:
        edits.append((opener[0], q_end, src[opener[1] : q_end] + src[opener[0] : opener[1]]))
    if move_close:
        edits.append((p_start, closer[1], src[closer[0] : closer[1]] + src[p_start : closer[0]]))
    kind = "Strong" if closer[1] - closer[0] == 2 else "Emphasis"
    start = opener[0] + (q_end - opener[1]) * move_open
    return edits, (kind, start, last + (closer[1] - closer[0]))


def _candidates(src: bytes, runs: dict[_Run, tuple[int, ...]]) -> list[tuple[list[_Edit], _Span]]:
    """The moves to try: each run the parser left as text is paired with the
    nearest one before it of the same characters in the same container, back to
    front, as the parser pairs delimiters."""
    groups: dict[tuple[tuple[int, ...], bytes], list[_Run]] = {}
    for run in sorted(runs):
        groups.setdefault((runs[run], src[run[0] : run[1]]), []).append(run)
    out = []
    for group in groups.values():
        j = len(group) - 1
        while j > 0:
            found = _move(src, group[j - 1], group[j])
            if found is not None:
                out.append(found)
            j -= 2 if found is not None else 1
    return out


def _apply(src: bytes, edits: list[_Edit]) -> bytes:
    for start, end, new in sorted(edits, reverse=True):  # back to front
        src = src[:start] + new + src[end:]
    return src


def _only_these_added(old: set[_Span], new: set[_Span], added: set[_Span]) -> bool:
    """Whether ``new`` is ``old`` plus ``added``, none of which holds an older one
    of its kind (``**注意：**请看**提示：**好`` would make one bold of it all)."""
    return new == old | added and not any(
        k == kind and a <= s and e <= b for kind, a, b in added for k, s, e in old
    )


def cjk_emphasis(md: str, options: pyromark.Options) -> str:
    """Make ``**注意：**请`` bold, as Discord and the web chat show it.

    Under CommonMark's flanking rules a closing ``**`` after punctuation and before
    a letter closes nothing (nor does an opening one after a letter and before
    punctuation open), and Chinese and Japanese put no space there:
    ``**注意：**请先备份`` and ``这是**“重点”**内容`` keep their asterisks.  Where a
    ``*``, ``**`` or ``__`` pair the parser left as text fails because punctuation
    touches a CJK letter, the punctuation moves across the delimiter:
    ``**注意**：请先备份``, ``这是“**重点**”内容``.

    Conservative: only runs the parser left as text are looked at (never code,
    autolinks or HTML; bare URLs are escaped before), and the moves are kept only
    if the text parsed again has exactly one more emphasis over each moved pair
    (holding none of its kind) and is otherwise the same.  All moves are checked
    at once; if that fails, one by one (up to a bound: each check parses the text
    again).
    """
    if not ("*" in md or "__" in md) or not _TOUCHING.search(md):
        return md  # most answers, CJK ones included: nothing to look at
    src = md.encode()
    runs, emphasis, shape = _parse(src, options)
    moves = _candidates(src, runs)
    if not moves:
        return md
    new = _apply(src, [e for edits, _ in moves for e in edits])
    _, new_emphasis, new_shape = _parse(new, options)
    if new_shape == shape and _only_these_added(emphasis, new_emphasis, {s for _, s in moves}):
        return new.decode()
    for edits, span in moves[:_MAX_TRIES]:  # the edits of different pairs never overlap
        new = _apply(src, edits)
        _, new_emphasis, new_shape = _parse(new, options)
        if new_shape == shape and _only_these_added(emphasis, new_emphasis, {span}):
            src, emphasis = new, new_emphasis
    return src.decode()
