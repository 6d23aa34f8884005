"""Markdown an LLM writes -> Discord parts: headings with bold, fences Discord does
not know, nested fences, long code lines."""

from __future__ import annotations

import re

import pytest

from channels.discord.render import LIMIT, render_text, split_text, to_discord_markdown


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


def test_an_unclosed_code_block_is_closed() -> None:
    # A streaming preview mid-block, or a model that stopped there: without the closing
    # fence Discord shows the ``` as text and the code as markdown.
    assert render_text("```py\nx")[0] == "```py\nx\n```"
    assert render_text("Here:\n\n~~~\n# comment\na*b*c")[0].endswith("a*b*c\n```")


_ITEM = "10. Add the constructor:\n    ```python\n"


def test_a_fence_indented_in_a_list_item_keeps_its_code_verbatim() -> None:
    text = _ITEM + "    def __init__(self, name):\n        self.name = name\n    ```\n11. Next"
    out = to_discord_markdown(text)
    assert "    def __init__(self, name):\n        self.name = name\n    ```\n11. Next" in out


def test_a_long_indented_block_is_closed_and_reopened_in_every_part() -> None:
    code = "\n".join(f"    x_{i} = compute_value({i})  # __dunder__ step" for i in range(70))
    parts = render_text(_ITEM + code + "\n    ```\n\n11. Done.")
    assert len(parts) > 1
    for p in parts:
        assert len(p) <= LIMIT
        assert len(_fence_kinds(p)) % 2 == 0, p[:60]
    assert all(p.startswith("```python\n") for p in parts[1:]), [p[:20] for p in parts]
    assert "__dunder__" in parts[-1] and "**dunder**" not in "".join(parts)


def test_a_fence_indented_inside_code_does_not_close_it() -> None:
    # A docstring showing a code block: the 4-space ``` is code, not the end of the block.
    text = '```python\ndef f():\n    """\n    ```\n    __x__\n    """\n```\nafter __b__'
    out = to_discord_markdown(text)
    assert "    __x__" in out and out.endswith("```\nafter **b**")


_WORDS = "word " * 395


@pytest.mark.parametrize(
    ("lead", "construct"),
    [
        ("see ", "[the deployment guide](https://example.com/docs/deploy)"),
        # an address with balanced parentheses (Wikipedia, MSDN) is a masked link too
        ("see ", "[Python programming language](https://en.wikipedia.org/wiki/Python_(lang))"),
        ("see ", "[the Dispose method docs](https://msdn.example.com/library/fs(v=vs.110).aspx)"),
        ("run ", "`make deploy ENV=prod now`"),
        ("this is ", "**very important to read**"),
    ],
)
def test_a_word_cut_does_not_fall_inside_a_span_or_link(lead: str, construct: str) -> None:
    # The last space before 2,000 characters lies inside the construct: the cut moves
    # to just before it.
    first, second = split_text(_WORDS + lead + construct + " for details " + "word " * 50)
    for half in (first, second):
        assert half.count("`") % 2 == 0 and half.count("**") % 2 == 0, half[-60:]
        assert len(re.findall(r"\[", half)) == len(re.findall(r"\]\([^)]*\)", half)), half[-60:]
    assert len(first) <= LIMIT and second.startswith(construct)


def test_an_image_whose_address_holds_parentheses_loses_only_its_title() -> None:
    # The address stopped at its first ')': the title stayed, after a broken address.
    out = to_discord_markdown('![logo](https://e.com/a_(b).png "Logo") and ![x](https://e.com/y)')
    assert out == "[logo](https://e.com/a_(b).png) and [x](https://e.com/y)"


_EMPTY_BLOCK_AT_END = re.compile(r"```[A-Za-z0-9_+\-.#]*\n```\s*$")


def test_long_answer_never_ends_a_part_with_an_empty_code_block() -> None:
    """Users saw a message ending in an empty code block showing only "python"
    (```python then ```), the code itself starting in the next message."""
    text = (
        "Here is the script:\n" + "word " * 100 + "\n```python\n"
        "x = 1  # " + "y" * 1600 + "\n```\nDone."
    )
    parts = render_text(text)
    assert all(len(p) <= LIMIT for p in parts)
    assert not any(_EMPTY_BLOCK_AT_END.search(p) for p in parts), parts
    assert any(p.startswith("```python\nx = 1") for p in parts)


def test_spoiler_line_is_not_a_table() -> None:
    """A spoiler ``||42||`` on its own line was shown as literal pipes in a code block."""
    out = to_discord_markdown("The answer is below.\n||42||")
    assert out == "The answer is below.\n||42||"


def test_table_needs_a_separator_row_and_its_fences_are_broken() -> None:
    """Only a header row followed by |---| starts a table; a ``` in a cell would
    have closed the code block the table is shown in."""
    out = to_discord_markdown("| a | b |\n|---|:-:|\n| 1 | ```2 |\n|x|")
    assert out == "```\n| a | b |\n|---|:-:|\n| 1 | ``\u200b`2 |\n|x|\n```"
    assert to_discord_markdown("|a|\n|b|") == "|a|\n|b|"
