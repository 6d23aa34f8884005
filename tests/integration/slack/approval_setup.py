"""What the Slack approval end-to-end tests share: the settings of a Parley on the
fake Slack (no pacing, fast previews) and whether a message still has its buttons."""

from __future__ import annotations

from typing import Any

from agent_core.store.embedded import EmbeddedValkey
from channels import slack as slack_pkg
from channels.slack.settings import SlackSettings
from tests.fakes.slack import FakeSlack, Message
from tests.integration.approvals_e2e.approvals_harness import settings_for


def has_buttons(m: Message) -> bool:
    return any(b.get("type") == "actions" for b in m.blocks)


def slack_settings(valkey: EmbeddedValkey, fake: FakeSlack) -> Any:
    platform = SlackSettings(
        slack_bot_token=fake.bot_token,  # type: ignore[arg-type]
        slack_signing_secret=fake.signing_secret,  # type: ignore[arg-type]
        slack_api_base_url=fake.api_url,
        slack_channel_pace_secs=0.0,
        slack_stream_interval=0.2,
    )
    return settings_for(valkey, "slack", platform, slack_pkg)
