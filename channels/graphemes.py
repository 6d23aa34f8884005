"""Where a text may be cut without cutting a character a person sees as one.

A hard cut (a long run with no space or line break) must not fall inside a flag
(two regional indicators), an emoji sequence joined by U+200D, an emoji and its
skin tone or variation selector, a keycap, a tag sequence, or a letter and its
combining accents: each half would show something else (🇺🇸 cut once turns every
later pair into 🇸🇺).  The standard library has no grapheme segmentation, and
these rules are the ones that matter for chat text (Unicode's UAX #29 in part).
"""

from __future__ import annotations

import unicodedata

_ZWJ = "\u200d"


def _extends(ch: str) -> bool:
    """``ch`` belongs to the character before it."""
    code = ord(ch)
    return (
        ch == _ZWJ
        or unicodedata.combining(ch) != 0
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0xE0100 <= code <= 0xE01EF
        or code == 0x20E3  # combining enclosing keycap
        or 0x1F3FB <= code <= 0x1F3FF  # skin tones
        or 0xE0020 <= code <= 0xE007F  # tag characters (subdivision flags)
    )


def _regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def is_boundary(text: str, i: int, floor: int = 0) -> bool:
    """Whether cutting ``text`` before index ``i`` keeps every character whole;
    ``floor``: a known boundary at or before ``i`` (flags are paired from there, so
    a long run of them is not counted back to its start on every call)."""
    if i <= 0 or i >= len(text):
        return True
    if _extends(text[i]) or text[i - 1] == _ZWJ:
        return False
    if _regional(text[i]) and _regional(text[i - 1]):
        run = 0
        j = i - 1
        while j >= floor and _regional(text[j]):
            run += 1
            j -= 1
        return run % 2 == 0  # a flag is a pair: cut between pairs only
    return True


def back_to_boundary(text: str, cut: int, floor: int) -> int:
    """The nearest ``i`` <= ``cut`` above ``floor`` that is a boundary; ``cut`` itself
    if there is none (a run of one character's marks longer than a message)."""
    i = cut
    while i > floor and not is_boundary(text, i, floor):
        i -= 1
    return i if i > floor else cut
