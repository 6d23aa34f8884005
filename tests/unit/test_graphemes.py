"""channels.graphemes: where a hard cut keeps every visible character whole."""

from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.graphemes import back_to_boundary, is_boundary

US, FR = "\U0001f1fa\U0001f1f8", "\U0001f1eb\U0001f1f7"
WAVE_TONE = "\U0001f44b\U0001f3fd"  # 👋🏽
KEYCAP = "1\ufe0f\u20e3"  # 1️⃣
SCOTLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"


@pytest.mark.parametrize("seq", [US, WAVE_TONE, KEYCAP, SCOTLAND, FAMILY, "e\u0301"])
def test_no_cut_inside_a_sequence(seq: str) -> None:
    text = "a" + seq + "b"
    assert is_boundary(text, 1) and is_boundary(text, 1 + len(seq))
    assert not any(is_boundary(text, i) for i in range(2, 1 + len(seq)))


def test_flags_are_cut_between_pairs_only() -> None:
    text = US + FR + US
    assert [i for i in range(1, len(text)) if is_boundary(text, i)] == [2, 4]


def test_back_to_boundary_steps_back_or_keeps_the_cut() -> None:
    assert back_to_boundary("a" + US * 3, 4, 0) == 3
    assert back_to_boundary("e" + "\u0301" * 10, 5, 0) == 5  # no boundary: the cut itself


@pytest.mark.parametrize("platform", ["discord", "slack"])
def test_discord_and_slack_hard_cuts_keep_flags_whole(platform: str) -> None:
    """Their splitters cut a run with no space at the raw limit, inside a flag."""
    from channels.discord.render import split_text as discord_split
    from channels.slack.mrkdwn import split_text as slack_split

    text = "x" + US * 2000
    parts = discord_split(text, 2000) if platform == "discord" else slack_split(text, 3000)
    assert "".join(parts) == text and len(parts) > 1
    for p in parts:
        assert sum(1 for c in p if 0x1F1E6 <= ord(c) <= 0x1F1FF) == 2 * p.count(US)


def test_flags_are_paired_from_a_known_boundary() -> None:
    """With ``floor`` (a boundary the caller knows, its part's start) a run of flags is
    counted from there, not back to the text's start on every call (a long run split
    into messages was quadratic); the answers are the same."""
    text = "x" + US * 50
    for floor in (1, 3, 41):
        assert all(is_boundary(text, i, floor) == is_boundary(text, i) for i in range(floor, 102))


JAMO = "\u1100\u1161\u11a8"  # 각 spelt in conjoining jamo: L V T
LV_T = "\uac00\u11a8"  # 가 (a precomposed LV syllable) + a trailing consonant
KSSA = "\u0915\u094d\u0937"  # क्ष: consonant, virama, consonant (GB9c)
KSSA_ZWJ = "\u0915\u094d\u200d\u0937"  # the same conjunct with a ZWJ after the virama
PREPEND = "\u0600\u0661"  # Arabic number sign (Prepend) + a digit
TONE_AFTER_LETTER = "a\U0001f3fd"  # a skin tone after a non-emoji still extends it


@pytest.mark.parametrize("seq", [JAMO, LV_T, KSSA, KSSA_ZWJ, PREPEND, TONE_AFTER_LETTER])
def test_no_cut_inside_hangul_indic_or_prepend_clusters(seq: str) -> None:
    """The hand-written rules cut conjoining jamo, Indic conjuncts and Prepend apart."""
    text = "a" + seq + "b"
    assert is_boundary(text, 1) and is_boundary(text, 1 + len(seq))
    assert not any(is_boundary(text, i) for i in range(2, 1 + len(seq)))


def test_cut_after_a_zwj_or_a_line_break_that_joins_nothing() -> None:
    """UAX #29: a ZWJ ends the cluster before it unless an emoji follows an emoji + ZWJ,
    and a mark after a line break starts a cluster of its own."""
    assert is_boundary("a\u200db", 2) and not is_boundary("a\u200db", 1)
    assert not is_boundary("\U0001f468\u200d\U0001f469", 2)
    assert is_boundary("\n\u0301", 1)
    assert is_boundary(KSSA + KSSA, 3)


@pytest.mark.parametrize("seq", [JAMO, KSSA])
@pytest.mark.parametrize("platform", ["discord", "slack", "telegram"])
def test_hard_cuts_keep_jamo_and_conjuncts_whole(platform: str, seq: str) -> None:
    """A run of 3-character clusters: each limit falls between their 2nd and 3rd characters."""
    from channels.discord.render import split_text as discord_split
    from channels.slack.mrkdwn import split_text as slack_split
    from channels.telegram.render import split as telegram_split

    text = seq * 1500
    if platform == "discord":
        parts = discord_split(text, 2000)
    elif platform == "slack":
        parts = slack_split(text, 3000)  # cuts at 2996: room to close a code block
    else:
        parts = [p.text for p in telegram_split(text, limit=4001)]
    assert "".join(parts) == text and len(parts) > 1
    assert all(len(p) % 3 == 0 for p in parts)


def test_floor_is_taken_as_a_boundary_and_nothing_before_it_is_read() -> None:
    """A lone regional indicator before ``floor`` would shift every pair after it if the
    run were counted from the text's start: with ``floor`` it is not."""
    text = "\U0001f1fa" + US * 20
    assert [i for i in range(1, 41) if is_boundary(text, i, 1)] == list(range(1, 41, 2))
    assert [i for i in range(1, 41) if is_boundary(text, i)] == list(range(2, 41, 2))


_ALPHABET = [
    "a", " ", "\n", "\r", "\u0301", "\u200d", "\ufe0f", "\u20e3", "\U0001f3fd",
    "\U0001f1fa", "\U0001f1f8", "\U0001f468", "\u2764", "\U000e0067", "\U000e007f",
    "\u1100", "\u1161", "\u11a8", "\uac00", "\uac01", "\u0915", "\u094d", "\u0937",
    "\u093e", "\u093c", "\u0600", "\u0e33",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_ALPHABET), min_size=1, max_size=40).map("".join), st.data())
def test_is_boundary_matches_a_full_segmentation(text: str, data: st.DataObject) -> None:
    """From any known boundary ``floor``, is_boundary answers as segmenting the whole text."""
    ends = {0}
    for cluster in regex.findall(r"\X", text):
        ends.add(max(ends) + len(cluster))
    floor = data.draw(st.sampled_from(sorted(ends)))
    for i in range(floor, len(text) + 1):
        assert is_boundary(text, i, floor) == (i in ends), (text, i, floor)
    if floor < len(text):
        cut = data.draw(st.integers(floor + 1, len(text)))
        below = [e for e in ends if floor < e <= cut]
        assert back_to_boundary(text, cut, floor) == (max(below) if below else cut)
