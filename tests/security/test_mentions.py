"""A malicious LLM output (or tool output the LLM repeats) cannot mass-mention.

Slack: everything the agent says goes through ``to_mrkdwn``; the control
sequences that ping (``<!channel>``, ``<!here>``, ``<!everyone>``,
``<!subteam^…>``, ``<@U…>``) must never come out of it, however the text is
written.  Discord: every payload carries ``allowed_mentions: {"parse": []}``.
Telegram has no mass mention; the web chat renders text, never HTML.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given

from agent_core.agent import approvals as ap
from agent_core.events import OutboundMessage
from channels.discord import render as discord_render
from channels.slack import render as slack_render
from channels.slack.mrkdwn import to_mrkdwn
from tests.fuzz.strategies import TEXT, examples

PING = re.compile(r"<[!@]")  # Slack: <!channel> <!here> <!everyone> <!subteam^..> <@U..>

RAW = [
    "@everyone @here @channel",
    "<!channel> <!here> <!everyone>",
    "<!subteam^S0123|@team>",
    "<@U0123> <@W0123|bob>",
    "&lt;!channel&gt;",
    "`<!channel>` and ```\n<!here>\n```",
    "**<!channel>** _<!here>_ ~~<!everyone>~~",
    "<https://example.com|<!channel>>",
    "> <!channel>\n- <!here>\n# <!everyone>",
]
LINKS = [
    "[x](!channel)",
    "[click](!here)",
    "[all](!everyone)",
    "![img](!here)",
    "[team](!subteam^S0123)",
    "[bob](@U0123)",
    "[a](<!here>)",
]


def _slack_texts(md: str) -> list[str]:
    out = [to_mrkdwn(md)]
    posts = slack_render.render(OutboundMessage(md))
    for post in posts + [slack_render.text_only(p) for p in posts]:  # as sent, or refused
        out.append(post.text)
        out += [b["text"]["text"] for b in post.blocks if b["type"] == "section"]
    out.append(slack_render.render_preview(OutboundMessage(md)).text)
    return out


@pytest.mark.parametrize("md", RAW)
def test_slack_raw_mentions_are_escaped(md: str) -> None:
    for text in _slack_texts(md):
        assert not PING.search(text), (md, text)


@pytest.mark.parametrize("md", LINKS)
def test_slack_markdown_links_cannot_become_mentions(md: str) -> None:
    for text in _slack_texts(md):
        assert not PING.search(text), (md, text)


@given(md=TEXT)
@examples(ci=300, long=5000)
def test_slack_any_text_without_links_never_pings(md: str) -> None:
    md = md.replace("](", ")(")  # links are covered by the test above
    for text in _slack_texts(md):
        assert not PING.search(text), (md, text)


@pytest.mark.parametrize("md", RAW + LINKS)
def test_discord_payloads_never_allow_mentions(md: str) -> None:
    from agent_core.events import Button, ButtonStyle

    btn = (Button("Approve", ap.token("AAAAAAAAAAAA", "approve"), ButtonStyle.PRIMARY),)
    for msg in (OutboundMessage(md), OutboundMessage(md, buttons=btn), OutboundMessage(md * 300)):
        for payload in discord_render.render(msg):
            assert payload["allowed_mentions"] == {"parse": [], "replied_user": False}


def test_approval_prompt_quotes_arguments_harmlessly() -> None:
    """Tool arguments chosen by the LLM are shown as code, never as live mentions."""
    a = ap.PendingApproval(
        id="AAAAAAAAAAAA",
        thread="{slack:T:C:1}",
        tool="http_request",
        call_id="c1",
        arguments={
            "url": "[x](!channel) <!here> @everyone",
            "headers": {"Authorization": "Bearer sk-live-SECRET"},
        },
        requester="slack:U1",
    )
    text = ap.prompt_text(a, 600)
    assert "sk-live-SECRET" not in text
    for out in _slack_texts(text):
        assert not PING.search(out), out
