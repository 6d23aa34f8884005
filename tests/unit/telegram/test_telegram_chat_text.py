"""What LLM Markdown must not lose on its way to Telegram (channels/telegram/render.py):
text the parser reads as HTML or math, link addresses in tables, code
indentation at part boundaries, formatting past Telegram's entity limits."""

from __future__ import annotations

from channels.telegram.render import Part, render_text


def shown(parts: list[Part]) -> str:
    return "\n".join(p.text for p in parts)


def code_of(parts: list[Part]) -> list[str]:
    return [
        p.text[e.offset : e.offset + e.length] for p in parts for e in p.entities if e.type == "pre"
    ]  # fmt: skip  (no astral chars in these texts)


# -- text changed or shown as markup -------------------------------------------------

BARE_URLS = (
    "https://github.com/acme/app/blob/main/pkg/__init__.py",
    "https://docs.python.org/3/reference/datamodel.html#object.__init__",
    "https://example.com/search?q=*foo*&x=1",
)


def test_a_bare_url_keeps_its_underscores_and_stars() -> None:
    """CommonMark has no bare links: ``…/pkg/__init__.py`` lost its underscores to
    bold, and Telegram then linked ``…/pkg/init.py``, a page that does not exist."""
    for url in BARE_URLS:
        [part] = render_text(f"See {url} for details, **{url}** too")
        assert part.text == f"See {url} for details, {url} too", part.text
        [bold] = part.entities  # the bold around the second one, nothing inside the first
        assert (bold.type, part.text[bold.offset : bold.offset + bold.length]) == ("bold", url)


def bold_of(parts: list[Part]) -> list[str]:
    return [p.text[e.offset : e.offset + e.length] for p in parts for e in p.entities]


def test_cjk_bold_ending_in_punctuation_is_bold() -> None:
    """A closing ``**`` after punctuation and before a letter closes nothing in
    CommonMark, and Chinese or Japanese puts no space there: ``**注意：**请`` showed
    its asterisks.  The punctuation moves out of the bold: ``**注意**：请``."""
    for md, text, bold in (
        ("**注意：**请先备份数据。", "注意：请先备份数据。", ["注意"]),
        ("**步骤1：**安装依赖", "步骤1：安装依赖", ["步骤1"]),
        ("这是**“重点”**内容", "这是“重点”内容", ["重点"]),
        ("- **注意：**请\n- **提示：**好的", "⦁ 注意：请\n⦁ 提示：好的", ["注意", "提示"]),
        ("**重要：**これは*強調：*です", "重要：これは強調：です", ["重要", "強調"]),
        (
            "**注意：**请先备份。**提示：**完成后重启。",
            "注意：请先备份。提示：完成后重启。",
            ["注意", "提示"],
        ),
    ):
        parts = render_text(md)
        assert (shown(parts), bold_of(parts)) == (text, bold), md


def test_cjk_punctuation_moves_only_where_the_bold_failed() -> None:
    """Code, URLs, bold that already works and a quote whose other half is inside
    the bold are left as written."""
    for md, text in (
        ("`**注意：**请`", "**注意：**请"),
        ("见 https://x.example/**注意：**请", "见 https://x.example/**注意：**请"),
        ("**注意**：请", "注意：请"),
        ("**他说“好”**然后", "**他说“好”**然后"),
    ):
        assert shown(render_text(md)) == text, md


# -- text silently dropped ------------------------------------------------------


def test_angle_bracket_placeholders_are_not_dropped() -> None:
    """LLMs write placeholders and generics in prose; the converter drops anything
    that parses as an inline HTML tag ('Replace  with ...')."""
    md = "Replace <your-token> with your key, then run ssh <user>@<host>. Returns Vec<T>."
    text = shown(render_text(md))
    for piece in ("<your-token>", "<user>", "<host>", "Vec<T>"):
        assert piece in text, f"{piece!r} vanished: {text!r}"


def test_html_block_content_is_not_dropped() -> None:
    """An HTML block (and the words inside it) is shown as written."""
    md = "<center>Backups run at 02:00 UTC</center>\n\nAnything else?"
    text = shown(render_text(md))
    assert "Backups run at 02:00 UTC" in text, text


def test_br_in_text_still_separates_lines() -> None:
    """`<br>` (common in LLM tables and lists) becomes a line break."""
    text = shown(render_text("First step<br>Second step"))
    assert "First stepSecond step" not in text, text


def test_links_inside_a_table_keep_their_url() -> None:
    """Tables become a `pre` block; a link in a cell keeps its address as text."""
    md = "| Project | Docs |\n|---|---|\n| Parley | [guide](https://example.com/parley/guide) |\n"
    parts = render_text(md)
    text = shown(parts)
    urls = [e.url for p in parts for e in p.entities if e.url]
    assert "https://example.com/parley/guide" in text or urls, (text, urls)


def test_unchecked_task_is_not_shown_as_checked() -> None:
    """'- [ ] x' must not render as U+2611 BALLOT BOX WITH CHECK (a ticked box)."""
    text = shown(render_text("- [ ] rotate the keys\n- [x] update the docs"))
    first = text.splitlines()[0]
    assert "\N{BALLOT BOX WITH CHECK}" not in first and "\N{WHITE HEAVY CHECK MARK}" not in first, (
        first
    )


# -- code blocks lose indentation -------------------------------------------------


def test_code_block_at_message_start_keeps_first_line_indentation() -> None:
    """Leading whitespace of a part is skipped, but not inside a `pre`."""
    md = "```yaml\n  name: parley\n  replicas: 2\n```"
    [code] = code_of(render_text(md))
    assert code == "  name: parley\n  replicas: 2"


def test_huge_code_block_split_keeps_indentation() -> None:
    """A code block longer than a message is split at a newline; the first line of
    the next piece keeps its indentation (copied Python still runs)."""
    lines = [
        ("    " if i % 2 else "") + f"value_{i:04d} = compute({i})  # some explanation here"
        for i in range(200)
    ]
    code = "\n".join(lines)
    parts = render_text(f"```python\n{code}\n```")
    assert len(parts) > 1
    assert "\n".join(code_of(parts)) == code


# -- Telegram's per-message entity limit -----------------------------------------


def test_no_part_carries_more_than_100_entities() -> None:
    """Telegram applies at most 100 entities per message and silently ignores the
    rest (tdlib/telegram-bot-api#820, rubenlagus/TelegramBots#854): a 3 kB
    answer with many `code`/**bold** items is split before the 101st."""
    md = "\n".join(f"- **opt{i}**: set `KEY_{i}`" for i in range(80))  # 160 entities
    parts = render_text(md)
    assert all(len(p.text) <= 4096 for p in parts)
    counts = [len(p.entities) for p in parts]
    assert max(counts) <= 100, counts


def test_shell_variables_in_prose_keep_their_dollar_signs() -> None:
    """'$HOME/$USER' is not inline LaTeX (the dollars would vanish)."""
    text = shown(render_text("Then run echo $HOME/$USER to check."))
    assert "$HOME/$USER" in text, text


def test_long_link_addresses_are_spread_over_parts_telegram_accepts() -> None:
    """Telegram refuses a message whose entities total about 9,500 bytes (URLs
    included): such an answer is split before that, all links kept."""
    md = " ".join(f"[source {i}](https://example.com/{'p' * 500}/{i})" for i in range(40))
    parts = render_text(md)
    assert len(parts) > 1
    for p in parts:
        assert sum(16 + len((e.url or "").encode()) for e in p.entities) <= 8000
    assert sum(1 for p in parts for e in p.entities if e.type == "text_link") == 40


def test_plain_fallback_writes_link_addresses_only_when_they_fit() -> None:
    [part] = render_text("See [the guide](https://example.com/guide) now.")
    assert part.plain().text == "See the guide (https://example.com/guide) now."
    [long] = render_text("[x](https://example.com/" + "a" * 2000 + ") " + "word " * 700)
    assert long.plain().text == long.text  # with the address it would not fit


def test_html_in_code_stays_code_and_spoilers_still_work() -> None:
    parts = render_text("`<b>x</b>` and ||hidden||\n\n```html\n<br>\n```")
    text = shown(parts)
    assert "<b>x</b>" in text and "<br>" in text and "||" not in text
    assert {e.type for p in parts for e in p.entities} >= {"code", "pre", "spoiler"}


def test_a_part_of_only_code_whitespace_is_not_sent() -> None:
    """Code whitespace is kept at part boundaries, but a part that would hold nothing
    else is dropped (Telegram refuses a message of only whitespace)."""
    parts = render_text("```\n" + "x" * 4090 + "\n      \n```")
    assert parts and all(p.text.strip() for p in parts), [p.text[:10] for p in parts]


# -- prose the converter misreads as spoilers, math or glued blocks ----------------


def entity_types(parts: list[Part]) -> set[str]:
    return {e.type for p in parts for e in p.entities}


def test_double_bars_in_prose_are_not_spoilers() -> None:
    """'||' is a spoiler only when the bars hug their words like emphasis does; as
    shell 'or' the text (and what lay between two of them) stayed hidden."""
    spaced = render_text("Use `a || b` or x || y || z")
    assert "x || y || z" in shown(spaced) and "spoiler" not in entity_types(spaced)
    glued = render_text("Use a||b or c||d in shell")
    assert "a||b or c||d" in shown(glued) and "spoiler" not in entity_types(glued)


def test_empty_table_cells_are_not_spoilers() -> None:
    """'| a || b |' is an empty cell, not the start of a spoiler over the rows."""
    parts = render_text("| a || b |\n|---|---|---|\n| 1 || 2 |\n")
    assert "1" in shown(parts) and "spoiler" not in entity_types(parts), shown(parts)


def test_a_hugging_spoiler_is_still_a_spoiler() -> None:
    [part] = render_text("The answer is (||42||), and a || b is shell.")
    [spoiler] = [e for e in part.entities if e.type == "spoiler"]
    assert part.text[spoiler.offset : spoiler.offset + spoiler.length] == "42"
    assert "a || b" in part.text


def test_lowercase_shell_variables_keep_their_dollar_signs() -> None:
    """'$src/$dst' is not inline LaTeX either: a '$…$' directly followed by a
    letter, digit or '/', or holding no math, is shown as written."""
    for md in ("Run cp $src/$dst now", "Then ${HOME}/$dir is used", "Use $foo$bar"):
        parts = render_text(md)
        assert shown(parts) == md and not entity_types(parts), shown(parts)


def test_inline_formulas_are_still_math() -> None:
    for md, math in (("so $x^2 + y^2$ holds", "x^2 + y^2"), ("where $x$ is the input", "x")):
        [part] = render_text(md)
        assert "$" not in part.text and math in part.text, part.text
        assert "code" in entity_types([part])


def test_a_list_items_code_block_starts_on_its_own_line() -> None:
    """The converter glued an item's first block onto its text ('Install it:pip …')."""
    md = (
        "1. Install it 🚀:\n   ```bash\n   pip install parley\n   ```\n"
        "2. Run it:\n   ```bash\n   parley run\n   ```\n3. Done."
    )
    [part] = render_text(md)
    units = part.text.encode("utf-16-le")

    def at(start: int, end: int) -> str:  # offsets are UTF-16 units (the emoji counts two)
        return units[2 * start : 2 * end].decode("utf-16-le")

    pres = [e for e in part.entities if e.type == "pre"]
    assert [at(e.offset, e.offset + e.length) for e in pres] == ["pip install parley", "parley run"]
    assert all(at(e.offset - 1, e.offset) == "\n" for e in pres), part.text


def test_a_list_items_quote_starts_on_its_own_line() -> None:
    [part] = render_text("- a\n  > quoted in list\n- b")
    [quote] = [e for e in part.entities if e.type == "blockquote"]
    assert part.text[quote.offset - 1] == "\n" and "aquoted" not in part.text, part.text
    assert part.text[quote.offset :].startswith("quoted in list")
