"""The Slack channel: Events API (signed HTTP) or Socket Mode in, Web API out.

Package convention (see channels/base.py): ``SETTINGS``, ``status(settings)``
and ``create(settings, deps)``.  Details and setup: docs/slack.md.
"""

from __future__ import annotations

from ..base import Channel, ChannelDeps
from .settings import SlackSettings

SETTINGS = SlackSettings


def status(settings: SlackSettings) -> tuple[bool, str]:
    """Enabled?, and why (for the start-up summary)."""
    if settings.slack_bot_token is None:
        return False, "SLACK_BOT_TOKEN not set"
    modes = []
    if settings.slack_signing_secret is not None:
        modes.append("Events API at /slack/events")
    if settings.slack_app_token is not None:
        modes.append("Socket Mode")
    if not modes:
        return False, (
            "SLACK_BOT_TOKEN is set but neither SLACK_SIGNING_SECRET, for the Events API, "
            "nor SLACK_APP_TOKEN, for Socket Mode"
        )
    return True, " + ".join(modes)


def create(settings: SlackSettings, deps: ChannelDeps) -> Channel:
    from .channel import SlackChannel

    return SlackChannel(settings, deps)


__all__ = ["SETTINGS", "SlackSettings", "create", "status"]
