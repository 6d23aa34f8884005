"""What an event routine sees: only messages that reach Parley.  With the default
GROUP_REPLY=mention a plain channel message is dropped by the adapter before ingest,
so no event routine sees it; docs/proactive.md said "incoming messages of one channel
or all" and gave a Slack channel example, never saying so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from channels.slack.parse import parse_event

DOCS = Path(__file__).resolve().parents[3] / "docs" / "proactive.md"


def plain_channel_message() -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T01",
        "event": {
            "type": "message",
            "channel": "C0OPS",
            "channel_type": "channel",
            "user": "U42",
            "text": "the API is down, 503 everywhere",
            "ts": "1764000000.000100",
        },
    }


def test_a_plain_channel_message_reaches_ingest_only_with_group_reply_all() -> None:
    assert parse_event(plain_channel_message(), bot_user_id="UBOT") is None
    assert parse_event(plain_channel_message(), bot_user_id="UBOT", group_reply="all") is not None


def test_the_docs_say_event_routines_see_only_what_reaches_parley() -> None:
    text = DOCS.read_text(encoding="utf-8")
    event = text[text.index("- **event**:") : text.index("- **manual**:")]
    assert "GROUP_REPLY=mention" in event and "never reaches Parley" in event, event[:400]
    example = text[text.index("/routine add outage") :]
    assert "GROUP_REPLY=all" in example[: example.index("A routine is validated")]
