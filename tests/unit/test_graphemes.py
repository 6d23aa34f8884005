"""channels.graphemes: where a hard cut keeps every visible character whole."""

from __future__ import annotations

import pytest

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
