"""Parser and renderer fuzzing: any input parses, and renders (or falls back), never raises.

The renderers' output is also checked against what each platform accepts: the
Telegram parts pass the fake Bot API's own validation (length in UTF-16 units,
entity offsets), Discord parts fit 2,000 characters, Slack sections fit 3,000.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from agent_core.agent import approvals as ap
from agent_core.agent.parser import ApprovalReply, Command, Text, is_command, parse
from agent_core.events import Button, ButtonStyle, OutboundMessage
from channels.discord import render as discord_render
from channels.slack import render as slack_render
from channels.slack.mrkdwn import to_mrkdwn
from channels.telegram import render as telegram_render
from tests.fakes.telegram import _check_entities, utf16_len
from tests.fakes.telegram_checks import entities_telegram_keeps
from tests.fuzz.strategies import TEXT, examples

MARKDOWN = st.one_of(
    TEXT,
    st.lists(
        st.sampled_from(
            [
                "**", "__", "*", "_", "~~", "`", "```", "```python\n", "\n", "\n\n", "# ", "#### ",
                "> ", "- ", "1. ", "| a | b |\n|---|---|\n| 1 | 2 |\n", "[", "](", ")", "![x](",
                "http://example.com", "<", ">", "&", "\\", "|", "😀", "\u200b", "a" * 100,
                "word ", "\t", "<!channel>", "@everyone", "\ue000", "\ue0010\ue001",
            ]
        ),
        max_size=60,
    ).map("".join),
    st.text(max_size=9000),
)  # fmt: skip


@given(text=TEXT, awaiting=st.booleans())
@examples(ci=400, long=5000)
def test_submission_parser_never_raises(text: str, awaiting: bool) -> None:
    sub = parse(text, awaiting_approval=awaiting)
    assert isinstance(sub, Command | Text | ApprovalReply)
    assert is_command(text) == isinstance(sub, Command)
    if isinstance(sub, ApprovalReply):
        assert awaiting and sub.decision in ("approve", "always", "deny")
    ap.parse_token(text)  # never raises either


@given(md=MARKDOWN)
@example(md="[`x`](http://example.com)")
@examples(ci=300, long=5000)
def test_telegram_renderer_output_is_accepted_by_the_bot_api(md: str) -> None:
    parts = telegram_render.render_text(md)
    assert parts
    for p in parts:
        assert p.text.strip(), "Telegram refuses empty messages"
        assert utf16_len(p.text) <= 4096
        sent = [e.to_dict() for e in p.entities]
        _check_entities(p.text, sent)
        kept = entities_telegram_keeps(sent)
        links = [e for e in sent if e["type"] == "text_link"]
        assert [e for e in kept if e["type"] == "text_link"] == links, "Telegram drops a link"


@given(md=MARKDOWN)
@examples(ci=300, long=5000)
def test_discord_renderer_parts_fit(md: str) -> None:
    parts = discord_render.render_text(md)
    assert parts
    for p in parts:
        assert p and len(p) <= 2000
    for payload in discord_render.render(OutboundMessage(md)):
        assert payload["allowed_mentions"] == {"parse": [], "replied_user": False}


@given(md=MARKDOWN, notice=st.booleans(), buttons=st.booleans())
@examples(ci=300, long=5000)
def test_slack_renderer_blocks_fit(md: str, notice: bool, buttons: bool) -> None:
    btns = (
        tuple(Button(lbl, ap.token("AAAAAAAAAAAA", d), ButtonStyle.PRIMARY) for lbl, d in (
            ("Approve", "approve"), ("Deny", "deny")
        ))
        if buttons
        else ()
    )  # fmt: skip
    msg = OutboundMessage(md, buttons=btns, notice=notice)
    posts = slack_render.render(msg)
    assert posts
    for post in posts + [slack_render.text_only(p) for p in posts]:  # as sent, or refused
        assert len(post.text) <= 4000
        assert len(post.blocks) <= 50
        for b in post.blocks:
            if b["type"] == "section":
                assert 0 < len(b["text"]["text"]) <= 3000
    to_mrkdwn(md)
    slack_render.render_preview(msg)
