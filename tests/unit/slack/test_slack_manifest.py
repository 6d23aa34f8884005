"""The app manifests in deploy/ match what the adapter needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.slack.inbound import EVENTS_PATH
from channels.slack.settings import SlackSettings
from tests.fakes.slack import MANIFEST_SCOPES

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
SCOPES = MANIFEST_SCOPES  # what the fake Slack's bot token holds, too
EVENTS = ["app_mention", "message.im", "message.channels", "message.groups"]


@pytest.mark.parametrize("name", ["slack-manifest.yaml", "slack-manifest-socket-mode.yaml"])
def test_manifest_has_scopes_events_and_command(name: str) -> None:
    text = (DEPLOY / name).read_text()
    lines = [line.strip() for line in text.splitlines()]
    for scope in SCOPES:
        assert f"- {scope}" in lines, scope
    for event in EVENTS:
        assert f"- {event}" in lines, event
    default_command = SlackSettings.model_fields["slack_slash_command"].default
    assert f"- command: {default_command}" in lines
    assert "is_enabled: true" in lines  # interactivity (buttons)


def test_http_manifest_points_every_url_at_the_events_route() -> None:
    text = (DEPLOY / "slack-manifest.yaml").read_text()
    urls = [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.strip().startswith(("url:", "request_url:"))
    ]
    assert len(urls) == 3
    assert all(u.endswith(EVENTS_PATH) for u in urls)
    assert "socket_mode_enabled: false" in text


def test_socket_manifest_has_no_urls() -> None:
    text = (DEPLOY / "slack-manifest-socket-mode.yaml").read_text()
    assert "url:" not in text and "socket_mode_enabled: true" in text
