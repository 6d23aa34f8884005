"""Markdown an LLM writes -> Slack mrkdwn: each test states what Slack should receive
(cases the earlier line-by-line converter got wrong)."""

from __future__ import annotations

from channels.slack.mrkdwn import split_text, to_mrkdwn


def test_link_whose_url_contains_parentheses_keeps_the_whole_url() -> None:
    # Wikipedia-style URLs are common in LLM answers.
    md = "See [Python](https://en.wikipedia.org/wiki/Python_(programming_language)) for more."
    out = to_mrkdwn(md)
    assert out == (
        "See <https://en.wikipedia.org/wiki/Python_(programming_language)|Python> for more."
    )


def test_italic_and_strike_inside_bold_are_converted() -> None:
    assert to_mrkdwn("**bold *it* more**") == "*bold _it_ more*"
    assert to_mrkdwn("**~~gone~~**") == "*~gone~*"


def test_bold_italic_triple_star() -> None:
    assert to_mrkdwn("***both***") in ("*_both_*", "_*both*_")


def test_heading_with_a_bold_part_stays_one_bold_line() -> None:
    assert to_mrkdwn("## Step 1: **Install** it") == "*Step 1: Install it*"
    assert to_mrkdwn("## **Install** it now") == "*Install it now*"


def test_heading_ending_in_hash_keeps_it() -> None:
    # CommonMark: a closing '#' sequence must be preceded by a space; 'C#' is the text.
    assert to_mrkdwn("# Learning C#") == "*Learning C#*"


def test_bare_url_with_double_underscore_is_not_mangled() -> None:
    url = "https://github.com/acme/app/blob/main/pkg/__init__.py"
    assert to_mrkdwn(f"Open {url} now") == f"Open {url} now"


def test_cjk_bold_ending_in_punctuation_is_bold() -> None:
    """``**注意：**请`` is no bold in CommonMark (a closing ``**`` after punctuation
    and before a letter closes nothing): the punctuation moves out of the bold."""
    assert to_mrkdwn("**注意：**请先备份数据。") == "*注意*：请先备份数据。"
    assert to_mrkdwn("**步骤1：**安装依赖") == "*步骤1*：安装依赖"
    assert to_mrkdwn("这是**“重点”**内容") == "这是“*重点*”内容"
    assert to_mrkdwn("`**注意：**请` **注意**：请") == "`**注意：**请` *注意*：请"


def test_horizontal_rule_dashes_become_a_line() -> None:
    # docs/slack.md / module docstring: rules become a line.  '---' (the most common
    # form) matches the table-separator regex first and silently disappears.
    assert to_mrkdwn("above\n\n---\n\nbelow") == "above\n\n──────────\n\nbelow"


def test_link_label_underscores_are_kept() -> None:
    assert to_mrkdwn("[my_file.py](https://x.io/f)") == "<https://x.io/f|my_file.py>"


def test_split_never_cuts_inside_a_link() -> None:
    # One long paragraph of links (no newline): the word-boundary cut lands on a space
    # inside '<url|label words>', leaving a broken '<https://…|the' in one message and
    # 'documentation page number N>' in the next.
    md = "See " + " and ".join(
        f"[the documentation page number {i}](https://example.com/docs/{i})" for i in range(200)
    )
    pieces = split_text(to_mrkdwn(md), 3900)
    assert len(pieces) > 1
    for p in pieces:
        assert p.count("<") == p.count(">"), (p[:60], p[-60:])


def test_backticks_never_form_a_code_fence_outside_code_blocks() -> None:
    # A code span of one backtick, `` ` ``, came out as ``` and opened a code block
    # that swallowed the rest of the answer (split_text reopened it in the next post).
    assert "```" not in to_mrkdwn("write `` ` `` here")
    assert "```" not in to_mrkdwn("two: ``` `` ``` and text: \\`\\`\\` and \\`\\``x`")
    para = "The quick brown fox jumps over the lazy dog near the river bank. " * 5
    md = "To type a literal backtick in Markdown, write `` ` ``.\n\n" + "\n\n".join([para] * 14)
    out = to_mrkdwn(md)
    assert "```" not in out
    posts = split_text(out, 3900)
    assert len(posts) > 1
    for p in posts:
        assert p.count("```") % 2 == 0, (p[:40], p[-40:])


def test_split_never_cuts_inside_inline_code_or_bold() -> None:
    # The word-boundary cut landed on a space inside `git commit -m fix --amend` or a
    # bold phrase: both halves then showed raw backticks / asterisks.
    for construct, mark in (
        ("`git commit -m fix --amend`", "`"),
        ("**this is an important bold phrase that continues**", "*"),
    ):
        pieces = split_text(to_mrkdwn("word " * 595 + construct + " then " + "word " * 100), 3000)
        assert len(pieces) == 2
        for p in pieces:
            assert p.count(mark) % 2 == 0, (p[:40], p[-40:])
