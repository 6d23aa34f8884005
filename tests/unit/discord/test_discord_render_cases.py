"""Markdown an LLM writes -> Discord parts: headings with bold, fences Discord does
not know, nested fences, long code lines."""

from __future__ import annotations

from channels.discord.render import LIMIT, render_text, to_discord_markdown


def _fence_kinds(part: str) -> list[str]:
    return [ln.strip()[:3] for ln in part.split("\n") if ln.strip()[:3] in ("```", "~~~")]


def test_deep_heading_with_bold_part() -> None:
    assert to_discord_markdown("#### **Note** here") == "**Note here**"


def test_tilde_fence_split_is_reopened_and_closed_with_the_same_fence() -> None:
    # A ~~~ block longer than 2,000 chars: Discord only knows ``` fences, so it becomes
    # a ``` block, closed and reopened with ``` across parts.
    text = "~~~python\n" + "\n".join(f"x = {i}  # comment" for i in range(200)) + "\n~~~"
    parts = render_text(text)
    assert len(parts) > 1
    for p in parts:
        assert len(p) <= LIMIT
        kinds = _fence_kinds(p)
        assert kinds and all(k == "```" for k in kinds), kinds


def test_four_backtick_fence_split_keeps_each_part_closed() -> None:
    # Showing markdown that itself contains a code block (```` outer fence).  The inner
    # ``` lines must not flip "inside code": the first part ends with a closing fence,
    # so the rest of the answer does not render as code.
    inner = "\n".join(f"x = {i}  # comment" for i in range(200))
    text = "Here is the README:\n\n````md\n```py\n" + inner + "\n```\n````\n\nAnd after: **done**."
    parts = render_text(text)
    assert len(parts) > 1
    first = parts[0]
    assert first.rstrip().endswith("```"), first[-60:]


def test_long_code_line_is_not_altered_inside_a_code_block() -> None:
    # A 1,990-char code line (a long shell one-liner, minified JSON) fits in one message
    # with its fences (1,998 chars): it is not cut, and a cut elsewhere keeps the space.
    line = "a" * 1000 + " " + "b" * 989
    text = "Run this:\n\n```\n" + line + "\n```\n\nThen restart the service and check the logs."
    parts = render_text(text)
    joined = "\n".join(parts)
    assert line in joined or ("a" * 1000 + " ") in joined, [p[-30:] for p in parts]


def test_double_underscore_bold_is_bold_not_underline() -> None:
    out = to_discord_markdown("a __strong__ word, `__x__` and https://e.com/__y__/")
    assert out == "a **strong** word, `__x__` and https://e.com/__y__/"


def test_a_tilde_line_inside_a_code_block_does_not_end_it() -> None:
    code = "\n".join(["~~~"] + [f"line {i} " + "y" * 60 for i in range(60)])
    parts = render_text("```\n" + code + "\n```\n\nafter")
    assert all(p.count("```") % 2 == 0 for p in parts), [p[-20:] for p in parts]
