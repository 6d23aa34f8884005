"""Rendering markdown to Telegram parts: entities, splitting, fallback."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from telegram import MessageEntity

from agent_core.events import Button, ButtonStyle
from channels.telegram.render import MAX_TEXT, Part, keyboard, render_plain, render_text, split


def u16(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def assert_valid(parts: list[Part]) -> None:
    assert parts
    for p in parts:
        assert p.text.strip()
        assert u16(p.text) <= MAX_TEXT
        for e in p.entities:
            assert e.offset >= 0 and e.length > 0
            assert e.offset + e.length <= u16(p.text)


def test_markdown_becomes_entities_not_escapes() -> None:
    [part] = render_text("Some **bold**, `code` and [a link](https://example.com). 1+1=2!")
    assert "**" not in part.text and "\\" not in part.text
    kinds = {e.type for e in part.entities}
    assert {"bold", "code", "text_link"} <= kinds
    link = next(e for e in part.entities if e.type == "text_link")
    assert link.url == "https://example.com"
    assert part.text[link.offset : link.offset + link.length] == "a link"


def test_unsafe_link_is_not_rendered_as_link() -> None:
    [part] = render_text("[click](javascript:alert(1))")
    assert all(e.type != "text_link" for e in part.entities)
    assert "click" in part.text


def test_a_link_telegram_would_not_make_keeps_its_address_in_the_text() -> None:
    """A relative path, a host without a dot or another scheme is no link on
    Telegram: the address is written after the text, as Part.plain() does."""
    [part] = render_text("Edit [settings.py](src/app/settings.py#L40) then run it.")
    assert part.text == "Edit settings.py (src/app/settings.py#L40) then run it."
    assert part.entities == ()
    [part] = render_text(
        "[click](javascript:alert(1)) 🙂 **[app](http://localhost:8000/x)** [ok](https://example.com)"
    )
    assert part.text == "click (javascript:alert(1)) 🙂 app (http://localhost:8000/x) ok"
    bold, link = part.entities  # both moved past what was written in
    assert (bold.type, part.text[bold.offset - 1 : bold.offset + bold.length - 1]) == (
        "bold",
        "app",
    )
    assert link.type == "text_link" and link.url == "https://example.com"
    assert part.text[link.offset - 1 : link.offset + link.length - 1] == "ok"  # 🙂: 2 units
    [part] = render_text("See <http://localhost:8000> or [mail](mailto:a@b.example).")
    assert part.text == "See http://localhost:8000 or mail."  # no address twice
    assert [e.url for e in part.entities] == ["mailto:a@b.example"]


def test_a_link_with_a_code_label_stays_a_link() -> None:
    """Code and pre can't nest with other entities (Bot API, "Formatting options"):
    sent a code and a text_link entity over ``config.py``, Telegram kept the code and
    dropped the link.  The link is kept; its label is plain text inside it."""
    url = "https://github.com/acme/app/blob/main/config.py"
    [part] = render_text(f"Open [`config.py`]({url}) or [the `x` file](https://a.example/x) now")
    assert part.text == "Open config.py or the x file now"
    assert [(e.type, e.url) for e in part.entities] == [
        ("text_link", url),
        ("text_link", "https://a.example/x"),
    ]
    [part] = render_text("Run `make` in [`src`](src/app/) first")  # no link: the code stays
    assert part.text == "Run make in src (src/app/) first"
    assert [(e.type, e.offset) for e in part.entities] == [("code", 4), ("code", 12)]


def test_long_text_splits_on_paragraphs_in_order() -> None:
    paras = [f"Paragraph {i} " + "word " * 150 for i in range(12)]
    parts = render_text("\n\n".join(paras))
    assert_valid(parts)
    assert len(parts) > 1
    joined = " ".join(p.text for p in parts)
    positions = [joined.index(f"Paragraph {i} ") for i in range(12)]
    assert positions == sorted(positions)
    for p in parts:  # every part starts at a paragraph start
        assert p.text.startswith("Paragraph ")


def test_split_falls_back_to_words_then_hard() -> None:
    words = split("word " * 2000)
    assert_valid(words)
    assert all(not p.text.endswith("wor") for p in words)
    hard = split("x" * 9000)
    assert [len(p.text) for p in hard] == [4096, 4096, 808]


def test_code_block_is_not_cut_when_it_fits() -> None:
    code = "\n".join(f"line_{i} = {i}" for i in range(200))  # ~3000 chars
    md = "intro " * 300 + "\n\n```python\n" + code + "\n```\n\nafter"
    parts = render_text(md)
    assert_valid(parts)
    pres = [e for p in parts for e in p.entities if e.type == "pre"]
    assert len(pres) == 1, "the code block must land whole in one part"
    holder = next(p for p in parts if any(e.type == "pre" for e in p.entities))
    pre = next(e for e in holder.entities if e.type == "pre")
    assert holder.text[pre.offset : pre.offset + pre.length].strip() == code
    assert pre.language == "python"


def test_huge_code_block_is_split_but_each_piece_stays_code() -> None:
    code = "\n".join(f"x{i} = {i}" for i in range(2000))
    parts = render_text(f"```\n{code}\n```")
    assert_valid(parts)
    assert len(parts) > 1
    for p in parts:
        assert any(e.type == "pre" for e in p.entities)


def test_entities_clipped_across_split_and_utf16_offsets() -> None:
    text = "😀" * 3000  # 6000 UTF-16 units
    ents = [MessageEntity("bold", 0, 6000)]
    parts = split(text, ents)
    assert_valid(parts)
    assert [u16(p.text) for p in parts] == [4096, 1904]
    assert [(e.offset, e.length) for p in parts for e in p.entities] == [(0, 4096), (0, 1904)]


def test_empty_text_never_yields_an_empty_message() -> None:
    assert render_text("") == [Part("…")]
    assert render_plain("   \n ") == [Part("…")]


def test_keyboard_uses_payload_as_callback_data() -> None:
    kb = keyboard(
        [
            Button("Approve", "a:abc:y", ButtonStyle.PRIMARY),
            Button("Always", "a:abc:a"),
            Button("Deny", "a:abc:n", ButtonStyle.DANGER),
        ]
    )
    assert kb is not None
    [row] = kb.inline_keyboard
    assert [(b.text, b.callback_data) for b in row] == [
        ("Approve", "a:abc:y"),
        ("Always", "a:abc:a"),
        ("Deny", "a:abc:n"),
    ]
    assert keyboard([]) is None


def test_digest_changes_when_keyboard_goes() -> None:
    p = Part("prompt")
    kb = keyboard([Button("Approve", "x")])
    assert p.digest(kb) != p.digest(None)
    assert p.digest(None) == Part("prompt").digest(None)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=12000))
def test_any_text_renders_valid_parts(text: str) -> None:
    parts = render_text(text)
    assert_valid(parts)
    plain = render_plain(text)
    assert_valid(plain)
    # Nothing but whitespace is lost by the plain split.
    if text.strip():
        assert "".join("".join(p.text.split()) for p in plain) == "".join(text.split())


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["**b**", "_i_", "`c`", "```\ncode\n```", "[l](https://x.y)", "\n\n", "\n", " ",
             "😀", "word", "# h", "- item", "> q", "||s||", "~~x~~", "*", "[", "`"]
        ),
        max_size=3000,
    )
)  # fmt: skip
def test_any_markdown_soup_renders_valid_parts(pieces: list[str]) -> None:
    assert_valid(render_text("".join(pieces)))
