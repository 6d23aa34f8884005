"""Telegram channel (python-telegram-bot 22): webhook or long polling, inline-keyboard
approvals, streamed edits, forum topics, entity formatting with a plain fallback,
flood-limit pacing shared through Redis.  See docs/telegram.md.
"""

from __future__ import annotations

from channels.base import ChannelDeps
from channels.telegram.channel import TelegramChannel
from channels.telegram.settings import TelegramSettings

SETTINGS = TelegramSettings


def status(settings: TelegramSettings, public_url: str = "") -> tuple[bool, str]:
    """Enabled?, and why: the mode in use (PUBLIC_URL decides it unless TELEGRAM_MODE does)."""
    if settings.telegram_bot_token is None:
        return False, "TELEGRAM_BOT_TOKEN not set"
    mode = settings.resolved_mode(public_url)
    if settings.telegram_mode:
        why = "TELEGRAM_MODE"
    else:
        why = "PUBLIC_URL is set" if public_url else "no PUBLIC_URL"
    return True, f"bot {settings.bot_id}, {mode} mode: {why}"


def create(settings: TelegramSettings, deps: ChannelDeps) -> TelegramChannel:
    return TelegramChannel(settings, deps)


__all__ = ["SETTINGS", "TelegramChannel", "TelegramSettings", "create", "status"]
