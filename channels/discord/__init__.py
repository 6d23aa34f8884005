"""Discord channel (discord.py 2): gateway inbound, REST outbound, persistent buttons.

See docs/discord.md for setup and every ``DISCORD_*`` variable.
"""

from __future__ import annotations

from channels.base import Channel, ChannelDeps

from .settings import DiscordSettings

SETTINGS = DiscordSettings


def status(settings: DiscordSettings) -> tuple[bool, str]:
    if settings.discord_bot_token is None:
        return False, "DISCORD_BOT_TOKEN not set"
    how = "auto-threads" if settings.discord_auto_thread else "replies in channel"
    return True, f"gateway (shards: {settings.discord_shards}), {how}"


def create(settings: DiscordSettings, deps: ChannelDeps) -> Channel:
    from .channel import DiscordChannel

    return DiscordChannel(settings, deps)


__all__ = ["SETTINGS", "DiscordSettings", "create", "status"]
