"""The ephemeral "On it…" acknowledgement of /parley echoes what was typed, as typed."""

from __future__ import annotations

from typing import Any

from agent_core.ingest import Submitted
from channels.slack.inbound import SlackInbound


class _Ingest:
    def __init__(self) -> None:
        self.events: list[Any] = []

    async def submit(self, event: Any) -> Submitted:
        self.events.append(event)
        return Submitted.ACCEPTED


async def test_the_ack_escapes_what_it_echoes() -> None:
    # typed: /parley why is <div> & <span> wrong here?  Slack sends &, <, > escaped;
    # the agent gets them decoded, and the mrkdwn echo must escape them again or
    # "<div>" is read as a control sequence, not text
    ingest = _Ingest()
    inbound = SlackInbound(ingest, None, bot_user_id=lambda: "UBOT")  # type: ignore[arg-type]
    form = {
        "command": "/parley",
        "channel_id": "C1",
        "user_id": "U1",
        "trigger_id": "t1",
        "team_id": "T1",
        "text": "why is &lt;div&gt; &amp; &lt;span&gt; wrong here?",
    }
    ack = await inbound.on_command(form)
    assert ingest.events[0].text == "why is <div> & <span> wrong here?"
    assert ack["text"] == "/parley why is &lt;div&gt; &amp; &lt;span&gt; wrong here?\n_On it…_"
