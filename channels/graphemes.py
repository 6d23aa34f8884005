"""Where a text may be cut without cutting a character a person sees as one.

A hard cut (a long run with no space or line break) must not fall inside an
extended grapheme cluster (Unicode's UAX #29): a flag (two regional indicators),
an emoji sequence joined by U+200D, an emoji and its skin tone or variation
selector, a keycap, a tag sequence, a letter and its combining accents, a Hangul
syllable spelt in conjoining jamo, an Indic conjunct (क्ष: consonant, virama,
consonant), a Prepend or SpacingMark and its letter: each half would show
something else (🇺🇸 cut once turns every later pair into 🇸🇺).  Python's
standard library has no grapheme segmentation; the ``regex`` package's ``\\X``
(one extended grapheme cluster, by the Unicode version it bundles) segments here.

An answer reads the text near ``i`` only, never before ``floor``: most of
UAX #29's rules look at the two characters either side of a position, so those
two are segmented; GB9c (conjuncts) and GB11 (emoji ZWJ sequences) look back
through the marks before them to one character more, so that much is.  The flag
rule (GB12/13) counts the regional indicators back to the run's start; ``regex``
recounts them at every position (segmenting a long run of flags is quadratic),
so that count alone is done here, back to ``floor`` at most.
"""

from __future__ import annotations

import regex

_CLUSTER = regex.compile(r"\X")
_RI = r"\p{Regional_Indicator}"
_FLAG_RUN = regex.compile(rf"(?r){_RI}+")  # matched backwards from ``endpos``
# A pair whose boundary depends on what is before it: two regional indicators
# (GB12/13, group 1), or one that depends on the marks before it (GB11: an emoji
# after ZWJ; GB9c: a consonant after a linker, i.e. a virama, or its extenders) ...
_LOOKS_BACK = regex.compile(
    rf"({_RI}{_RI})|\u200d\p{{Extended_Pictographic}}"
    r"|[\p{InCB=Linker}\p{InCB=Extend}]\p{InCB=Consonant}"
)
# ... these marks, matched backwards from ``endpos`` (and one character more).
_MARKS = regex.compile(
    r"(?r)[\p{Grapheme_Cluster_Break=Extend}\p{Grapheme_Cluster_Break=ZWJ}"
    r"\p{InCB=Linker}\p{InCB=Extend}]*"
)


def is_boundary(text: str, i: int, floor: int = 0) -> bool:
    """Whether cutting ``text`` before index ``i`` keeps every character whole;
    ``floor``: a known boundary at or before ``i`` (nothing before it is read, so a
    long run of flags is not counted back to its start on every call)."""
    if i <= 0 or i >= len(text):
        return True
    floor = floor if 0 <= floor <= i else 0
    if i == floor:
        return True
    start = i - 1
    context = _LOOKS_BACK.fullmatch(text, i - 1, i + 1)
    if context is not None:
        if context.group(1):  # flags: cut between pairs
            run = _FLAG_RUN.match(text, floor, i)
            return run is not None and (i - run.start()) % 2 == 0
        marks = _MARKS.match(text, floor, i - 1)
        start = max(floor, (marks.start() if marks is not None else i - 1) - 1)
    # ``i`` is a boundary iff the last cluster of text[start : i + 1] is text[i] alone
    # (a slice: ``regex`` would otherwise read the text before ``start`` too).
    clusters = _CLUSTER.findall(text[start : i + 1])
    return len(clusters[-1]) == 1


def back_to_boundary(text: str, cut: int, floor: int) -> int:
    """The nearest ``i`` <= ``cut`` above ``floor`` that is a boundary; ``cut`` itself
    if there is none (a run of one character's marks longer than a message)."""
    i = cut
    while i > floor and not is_boundary(text, i, floor):
        i -= 1
    return i if i > floor else cut
