"""Markdown -> mrkdwn: block structure, nesting, literal HTML and mention safety (pure)."""

from __future__ import annotations

import re

import pytest

from channels.slack import mrkdwn
from channels.slack.mrkdwn import split_text, to_mrkdwn

ZW = "\u200b"


def test_ordered_lists_keep_their_numbers() -> None:
    assert to_mrkdwn("1. one\n2. two **b**") == "1. one\n2. two *b*"
    assert to_mrkdwn("3. three\n4. four") == "3. three\n4. four"


def test_nested_lists_are_indented_under_their_item() -> None:
    md = "1. first\n   - a _i_\n     - deeper\n2. second\n- [ ] todo\n  - sub"
    assert to_mrkdwn(md) == ("1. first\n   • a _i_\n     • deeper\n2. second\n• ☐ todo\n  • sub")


def test_blank_lines_between_blocks_follow_the_source() -> None:
    assert to_mrkdwn("a\nb\n\nc") == "a\nb\n\nc"  # a line break stays a line break
    assert to_mrkdwn("# T\ntext\n\n\n\nmore") == "*T*\ntext\n\nmore"
    assert to_mrkdwn("- a\n- b\n\nafter") == "• a\n• b\n\nafter"  # tight list
    assert to_mrkdwn("- a\n\n- b\n\n  b2") == "• a\n\n• b\n\n  b2"  # loose list


def test_blockquote_with_bold_and_paragraphs() -> None:
    md = "> **Note:** read\n> this\n>\n> - item\n\nout"
    assert to_mrkdwn(md) == "> *Note:* read\n> this\n>\n> • item\n\nout"


def test_a_code_block_in_a_list_item_keeps_only_its_own_indentation() -> None:
    # Every code line started with the item's "   " inside the fences: Python pasted
    # from a numbered step failed with "unexpected indent".  Quotes still mark them.
    md = '1. Create `app.py`:\n\n   ```python\n   def main():\n       print("hi")\n   ```\n2. Run'
    assert to_mrkdwn(md) == (
        '1. Create `app.py`:\n\n   ```\ndef main():\n    print("hi")\n   ```\n2. Run'
    )
    assert to_mrkdwn("- ```\n  x\n  ```") == "• ```\nx\n  ```"
    md = "> - a\n>   ```\n>   code\n>\n>    more\n>   ```"
    assert to_mrkdwn(md) == "> • a\n>   ```\n> code\n> \n>  more\n>   ```"


def test_code_block_containing_a_fence_inside_a_longer_fence() -> None:
    md = "````markdown\n```python\nx = a < b\n```\n````\nafter"
    out = to_mrkdwn(md)
    fence = f"`{ZW}`{ZW}`"  # looks the same, but cannot end Slack's code block
    assert out == f"```\n{fence}python\nx = a &lt; b\n{fence}\n```\nafter"
    assert out.count("```") == 2
    assert to_mrkdwn("``a ``` b``") == f"`a `{ZW}`{ZW}` b`"


def test_html_is_shown_as_literal_text() -> None:
    assert to_mrkdwn("<div>**x**</div>\n\ntext") == "&lt;div&gt;**x**&lt;/div&gt;\n\ntext"
    assert to_mrkdwn("a <b>bold</b> <!-- c -->") == "a &lt;b&gt;bold&lt;/b&gt; &lt;!-- c --&gt;"
    assert to_mrkdwn("<details>\n<summary>s</summary>\n</details>") == (
        "&lt;details&gt;\n&lt;summary&gt;s&lt;/summary&gt;\n&lt;/details&gt;"
    )


@pytest.mark.parametrize(
    "md",
    [
        "<!here> and <@U0123> and <!subteam^S1|@t>",
        "**<!channel>** `<!here>` [<!here>](https://x.io)",
        "[x](<!here>) [y](@U0123) ![z](!channel) <foo:!here>",
        "[a](https://x.io/<!here>) <https://x.io|<!here>>",
        "| <!here> |\n|---|\n| <@U1> |",
        "> <!channel>\n- <!here>\n# <!everyone>\n\n    <!here>",
        "[lbl]: <!here>\n\n[lbl]",
    ],
)
def test_no_mention_can_be_created(md: str) -> None:
    out = to_mrkdwn(md)
    assert not re.search(r"<[!@]", out), out
    for link in re.findall(r"<[^>]*>", out):
        assert re.match(r"<(https?://|mailto:)", link), out


def test_links_images_and_targets() -> None:
    assert to_mrkdwn("[run](javascript:alert(1))") == "run (javascript:alert(1))"
    assert to_mrkdwn("![chart](https://x.io/c.png)") == "<https://x.io/c.png|chart>"
    assert to_mrkdwn("<me@x.io>") == "<mailto:me@x.io|me@x.io>"
    assert to_mrkdwn("[a|b](https://x.io/?q=a|b)") == "<https://x.io/?q=a%7Cb|a¦b>"
    assert to_mrkdwn("**[Docs](https://x.io)**") == "*<https://x.io|Docs>*"
    assert to_mrkdwn("[**Docs** `v2`](https://x.io)") == "<https://x.io|Docs v2>"


def test_bare_urls_keep_their_characters_but_not_surrounding_markup() -> None:
    assert to_mrkdwn("**see https://x.io/a_b_c.**") == "*see https://x.io/a_b_c.*"
    assert to_mrkdwn("_https://x.io/y_") == "_https://x.io/y_"
    assert to_mrkdwn("`https://x.io/__a__`") == "`https://x.io/__a__`"  # code untouched


def test_emphasis_inside_a_word_or_across_lines() -> None:
    assert to_mrkdwn("un**believ**able") == f"un{ZW}*believ*{ZW}able"
    assert to_mrkdwn("**two\nlines**") == "*two*\n*lines*"
    assert to_mrkdwn("****x****") == "*x*"  # nested bold is still one bold


def test_tables_keep_inline_formatting() -> None:
    md = "| **k** | v |\n|:--|--:|\n| `a<b` | [l](https://x.io) |"
    assert to_mrkdwn(md) == "| *k* | v |\n| `a&lt;b` | <https://x.io|l> |"


def test_rules_headings_and_empty_input() -> None:
    assert to_mrkdwn("a\n\n***\n\n___") == "a\n\n──────────\n\n──────────"
    assert to_mrkdwn("Title\n=====\n\n#\n\ntext") == "*Title*\n\ntext"
    assert to_mrkdwn("") == ""


def test_internal_error_falls_back_to_escaped_text(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(mrkdwn.pyromark, "events_with_range", boom)
    assert to_mrkdwn("**a** < b") == "**a** &lt; b"


def test_split_never_cuts_an_escape_or_a_fence() -> None:
    text = "x" * 30 + "&amp;" * 20
    for p in split_text(text, 40):
        assert re.fullmatch(r"x*(&amp;)*", p), p
    code = "a" * 19 + "```" + "b" * 40  # a hard cut would fall between the backticks
    assert all("```" in p or "`" not in p for p in split_text(code, 24))
