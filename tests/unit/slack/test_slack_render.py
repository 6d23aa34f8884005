"""OutboundMessage -> Slack message arguments (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_core.events import Button, ButtonStyle, OutboundMessage
from channels.slack.render import MESSAGE_LIMIT, SECTION_LIMIT, render, render_preview, text_only

APPROVAL = (
    Button("Approve", "ap:1:y", ButtonStyle.PRIMARY),
    Button("Always", "ap:1:a"),
    Button("Deny", "ap:1:n", ButtonStyle.DANGER),
)


def test_short_message_is_one_section() -> None:
    [post] = render(OutboundMessage("hello **you**"))
    assert post.text == "hello *you*"
    assert post.blocks == [{"type": "section", "text": {"type": "mrkdwn", "text": "hello *you*"}}]


def test_buttons_are_an_actions_block_on_the_last_message() -> None:
    text = "x " * 5000  # longer than one message
    posts = render(OutboundMessage(text, buttons=APPROVAL))
    assert len(posts) >= 2
    assert all(b["type"] == "section" for p in posts[:-1] for b in p.blocks)
    last = posts[-1]
    assert last.blocks[-1]["type"] == "actions" and len(last.blocks) == 2
    els = last.blocks[-1]["elements"]
    assert [(e["action_id"], e["value"], e.get("style")) for e in els] == [
        ("parley:approve", "ap:1:y", "primary"),
        ("parley:always", "ap:1:a", None),
        ("parley:deny", "ap:1:n", "danger"),
    ]


def test_duplicate_and_odd_labels_get_unique_action_ids() -> None:
    [post] = render(
        OutboundMessage("?", buttons=(Button("OK", "1"), Button("ok", "2"), Button("✓", "3")))
    )
    ids = [e["action_id"] for e in post.blocks[-1]["elements"]]
    assert len(set(ids)) == 3 and all(len(i) <= 255 for i in ids)


def test_edit_without_buttons_has_no_actions_block() -> None:
    [post] = render(OutboundMessage("Approved by @ann"))
    assert [b["type"] for b in post.blocks] == ["section"]


def test_text_only_fallback_keeps_the_buttons_and_sends_no_empty_blocks() -> None:
    [post] = render(OutboundMessage("**a** < b"))
    plain = text_only(post)
    assert plain.text == "*a* &lt; b" and plain.kwargs() == {"text": "*a* &lt; b"}
    assert plain.kwargs(update=True) == {"text": "*a* &lt; b", "blocks": []}
    [prompt] = render(OutboundMessage("?", buttons=APPROVAL))
    assert [b["type"] for b in text_only(prompt).blocks] == ["actions"]


def test_preview_is_one_message() -> None:
    post = render_preview(OutboundMessage("y " * 5000, final=False))
    assert len(post.text) < 4000 and post.text.endswith("…")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=9000), st.booleans())
def test_any_text_renders_within_limits(text: str, buttons: bool) -> None:
    posts = render(OutboundMessage(text, buttons=APPROVAL if buttons else ()))
    assert posts
    for p in posts:
        assert len(p.text) <= MESSAGE_LIMIT
        assert len(p.blocks) <= 50
        assert all(
            len(b["text"]["text"]) <= SECTION_LIMIT for b in p.blocks if b["type"] == "section"
        )
        assert all(b["text"]["text"].strip() for b in p.blocks if b["type"] == "section")
