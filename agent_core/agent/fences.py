"""Markdown code fences in a partial answer: a marker added to an answer cut short
(``_(stopped)_``, ``_(cut off)_``) goes after the code block it was cut in, never
inside it, where every platform would show it as code."""

from __future__ import annotations

import re

# A fence at any indentation (list items put theirs 4+ spaces in), ``` or ~~~.
_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")


def open_fence(text: str) -> str:
    """The fence that closes the code block ``text`` ends inside ('' if none):
    CommonMark's rule, same character, at least as long, nothing after it."""
    opener: tuple[str, str] | None = None  # (indent, run)
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m is None:
            continue
        indent, run, info = m.group(1), m.group(2), m.group(3).strip()
        if opener is None:
            if not (run[0] == "`" and "`" in info):  # ``` `x` ``` is inline code
                opener = (indent, run)
        elif run[0] == opener[1][0] and len(run) >= len(opener[1]) and not info:
            opener = None
    return "" if opener is None else opener[0] + opener[1]


def with_marker(text: str, marker: str) -> str:
    """``text`` with ``marker`` as a paragraph of its own, after closing a code block
    left open."""
    closing = open_fence(text)
    if closing:
        text = text.rstrip("\n") + "\n" + closing
    return (text + "\n\n" + marker).strip()
