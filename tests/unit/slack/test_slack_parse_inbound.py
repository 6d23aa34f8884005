"""Slack events -> InboundEvent: /me messages, shared messages, bare mentions."""

from __future__ import annotations

from typing import Any

from channels.slack.parse import BARE_MENTION_TEXT, followup_candidate, parse_event
from tests.unit.slack.test_slack_parse import body


def dm(**kw: Any) -> dict[str, Any]:
    ev = {
        "type": "message",
        "user": "U1",
        "text": "hi",
        "ts": "100.1",
        "channel": "D1",
        "channel_type": "im",
    }
    ev.update(kw)
    return body(ev)


SHARED = {
    "is_share": True,
    "is_msg_unfurl": True,
    "author_name": "Bob",
    "text": "prod DB failover at 03:12, replica lag 40s\n<@U7|carol> please check",
    "fallback": "[March 3rd, 2025 3:12 AM] bob: prod DB failover at 03:12, replica lag 40s",
    "ts": "99.5",
    "channel_id": "C9",
}


def test_me_message_in_a_dm_is_answered() -> None:
    """'/me is stuck on the deploy' arrives as subtype me_message: a user's own words."""
    ev = parse_event(dm(subtype="me_message", text="is stuck on the deploy, help"))
    assert ev is not None
    assert ev.text == "is stuck on the deploy, help"


def test_me_message_in_a_bot_thread_is_a_followup() -> None:
    raw = body(
        {
            "type": "message",
            "subtype": "me_message",
            "user": "U1",
            "text": "waves",
            "ts": "100.2",
            "thread_ts": "99.0",
            "channel": "C1",
            "channel_type": "channel",
        }
    )
    assert followup_candidate(raw) == ("T1", "C1", "99.0")
    ev = parse_event(raw, in_bot_thread=True)
    assert ev is not None and ev.text == "waves"


def test_shared_message_content_reaches_the_agent() -> None:
    """A message shared (forwarded) into the bot's DM: the user's comment is ``text``,
    the shared message a legacy attachment with is_share; the agent gets both."""
    ev = parse_event(dm(text="can you explain this?", attachments=[SHARED]))
    assert ev is not None
    assert ev.text == (
        "can you explain this?\n\n"
        "Shared message from Bob:\n"
        "> prod DB failover at 03:12, replica lag 40s\n"
        "> @carol please check"
    )


def test_shared_message_without_comment_and_its_files() -> None:
    files = [{"id": "F1", "name": "graph.png", "mimetype": "image/png", "size": 10,
              "url_private": "https://files.slack.com/graph.png"}]  # fmt: skip
    ev = parse_event(dm(text="", attachments=[SHARED | {"files": files}]))
    assert ev is not None
    assert ev.text.startswith("Shared message from Bob:\n> prod DB failover")
    [att] = ev.attachments
    assert (att.kind, att.name) == ("image", "graph.png")


def test_link_previews_are_not_shared_messages() -> None:
    preview = {"title": "Example", "text": "An example page", "from_url": "https://x.example"}
    ev = parse_event(dm(text="look https://x.example", attachments=[preview, "junk"]))
    assert ev is not None and ev.text == "look https://x.example"


def test_bare_mention_in_a_dm_does_not_produce_an_empty_turn() -> None:
    """A DM or a channel mention that is only '<@UBOT>' is answered with a short
    placeholder text, never published empty."""
    ev = parse_event(dm(text="<@UBOT>"))
    assert ev is not None and ev.text == BARE_MENTION_TEXT
    mention = {"type": "app_mention", "user": "U1", "text": " <@UBOT> ", "ts": "5.1"}
    ev = parse_event(body(mention | {"channel": "C1"}))
    assert ev is not None and ev.text == BARE_MENTION_TEXT and ev.mentions_bot


def test_message_with_nothing_in_it_is_ignored() -> None:
    assert parse_event(dm(text="")) is None
    assert parse_event(dm(text="  ", attachments=[{"is_share": True, "text": ""}])) is None


def test_mention_removal_keeps_code_indentation() -> None:
    text = "<@UBOT> why?\n```\ndef f():\n    return  1\n```"
    ev = parse_event(dm(text=text))
    assert ev is not None
    assert ev.text == "why?\n```\ndef f():\n    return  1\n```"
    ev = parse_event(dm(text="hi <@UBOT|parley> there"))
    assert ev is not None and ev.text == "hi there"
