"""Markdown -> mrkdwn and splitting (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from channels.slack.mrkdwn import escape, split_text, to_mrkdwn


def test_common_markdown() -> None:
    assert to_mrkdwn("**bold** and __also__") == "*bold* and *also*"
    assert to_mrkdwn("*italic* and _too_") == "_italic_ and _too_"
    assert to_mrkdwn("~~gone~~") == "~gone~"
    assert to_mrkdwn("[Parley](https://example.com/a_b)") == "<https://example.com/a_b|Parley>"
    assert to_mrkdwn("<https://example.com>") == "<https://example.com>"
    assert to_mrkdwn("# Title\n## Sub") == "*Title*\n*Sub*"
    assert to_mrkdwn("- one\n* two\n  - nested") == "• one\n• two\n  • nested"
    assert to_mrkdwn("- [x] done\n- [ ] todo") == "• ☑ done\n• ☐ todo"
    assert to_mrkdwn("> quoted **x**") == "> quoted *x*"


def test_escaping_everywhere_but_links_stay_links() -> None:
    assert to_mrkdwn("a < b & c > d") == "a &lt; b &amp; c &gt; d"
    assert to_mrkdwn("`x<y`") == "`x&lt;y`"
    assert to_mrkdwn("<!channel> hi") == "&lt;!channel&gt; hi"  # no injected mentions


def test_code_blocks_are_not_formatted() -> None:
    md = "```python\ndef f(**kw):\n    return a < b\n```\nafter **b**"
    assert to_mrkdwn(md) == "```\ndef f(**kw):\n    return a &lt; b\n```\nafter *b*"
    assert to_mrkdwn("```\nunclosed **x**") == "```\nunclosed **x**\n```"


def test_tables_lose_their_separator_row() -> None:
    assert to_mrkdwn("| a | b |\n|---|---|\n| 1 | 2 |") == "| a | b |\n| 1 | 2 |"


def test_split_prefers_paragraphs_then_lines_then_words() -> None:
    text = "a" * 50 + "\n\n" + "b" * 50
    assert split_text(text, 60) == ["a" * 50, "b" * 50]
    words = " ".join(["word"] * 40)
    parts = split_text(words, 50)
    assert all(len(p) <= 50 for p in parts)
    assert " ".join(parts).split() == words.split()


def test_split_closes_and_reopens_code_blocks() -> None:
    code = "```\n" + "\n".join(f"line {i}" for i in range(100)) + "\n```"
    parts = split_text("intro\n\n" + code, 200)
    assert all(len(p) <= 200 for p in parts)
    assert all(p.count("```") % 2 == 0 for p in parts)
    body = "\n".join(p.replace("```", "") for p in parts)
    assert all(f"line {i}\n" in body + "\n" for i in range(100))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_any_input_renders(md: str) -> None:
    out = to_mrkdwn(md)
    assert isinstance(out, str)
    # nothing Slack would read as a control sequence survives unescaped outside our links
    stripped = "".join(ch for ch in md if ch not in "\ue000\ue001")
    if "<" not in stripped and "[" not in stripped:
        assert "<" not in out


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab `\n*_&<>[]()#-")), max_size=600), st.integers(16, 120)
)
def test_split_respects_limit_and_keeps_text(text: str, limit: int) -> None:
    parts = split_text(text, limit)
    assert all(len(p) <= limit for p in parts)
    squeezed = "".join("".join(parts).replace("```", "").split())
    assert squeezed == "".join(text.replace("```", "").split())


def test_escape() -> None:
    assert escape("<&>") == "&lt;&amp;&gt;"
