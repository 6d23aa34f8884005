"""Telegram channel (python-telegram-bot 22): webhook or long polling, inline-keyboard
approvals, streamed edits, forum topics, entity formatting with a plain fallback,
flood-limit pacing shared through Redis.  See docs/telegram.md.
"""

from __future__ import annotations

from channels.base import ChannelDeps
from channels.telegram.channel import TelegramChannel
from channels.telegram.settings import TelegramSettings

SETTINGS = TelegramSettings


def status(settings: TelegramSettings) -> tuple[bool, str]:
    if settings.telegram_bot_token is None:
        return False, "TELEGRAM_BOT_TOKEN not set"
    mode = settings.telegram_mode or "auto"
    return True, f"bot {settings.bot_id}, mode {mode}"


def create(settings: TelegramSettings, deps: ChannelDeps) -> TelegramChannel:
    return TelegramChannel(settings, deps)


__all__ = ["SETTINGS", "TelegramChannel", "TelegramSettings", "create", "status"]
