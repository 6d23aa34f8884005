"""Removing the bot's own mention from inbound text, the same way on every platform."""

from __future__ import annotations

import re

# What the agent reads when someone mentions the bot and writes nothing else
# (an empty turn would be refused or answered with nothing).
BARE_MENTION_TEXT = "(mentioned you without a message)"


def cut_mentions(pat: re.Pattern[str], text: str) -> str:
    """``text`` without the matches of ``pat``, other spacing (code indentation) kept.

    The spaces around a removed mention become one space between two words, and
    none at the edge of a line or before punctuation.
    """
    out: list[str] = []
    last = 0
    for m in pat.finditer(text):
        start, end = m.start(), m.end()
        while start > last and text[start - 1] in " \t":
            start -= 1
        while end < len(text) and text[end] in " \t":
            end += 1
        out.append(text[last:start])
        before, after = text[start - 1 : start], text[end : end + 1]
        if before and after and not before.isspace() and not after.isspace():
            out.append("" if after in ",.;:!?)" else " ")
        last = end
    out.append(text[last:])
    return "".join(out)
