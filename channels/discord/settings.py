"""Discord settings: every ``DISCORD_*`` variable (see docs/discord.md)."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, SecretStr, field_validator

from agent_core.settings import ParleySettings, header_safe

DEFAULT_API_BASE_URL = "https://discord.com/api/v10"

_SHARDS_RE = re.compile(r"^(auto|\d+|[\d,\-\s]+/\d+)$")


class DiscordSettings(ParleySettings):
    SELF_CHECKED_SECRETS: ClassVar[frozenset[str]] = frozenset({"discord_bot_token"})

    # Bot token from the developer portal (Bot -> Reset Token); enables the channel.
    discord_bot_token: SecretStr | None = None
    # REST base (tests, proxies). discord.py's default is https://discord.com/api/v10.
    discord_api_base_url: str = DEFAULT_API_BASE_URL
    # Gateway websocket URL (tests, proxies); "" = discord.py's built-in address.
    discord_gateway_url: str = ""
    # auto | N (all N shards here) | "0-3/8" or "0,2/8" (these shard ids of 8 total).
    discord_shards: str = "auto"
    # Open a thread on the first mention in a guild channel and continue there.
    discord_auto_thread: bool = False
    # Name of an auto-created thread ({text} = the start of the message).
    discord_thread_name: str = "{text}"
    # Auto-archive minutes for auto-created threads (60, 1440, 4320, 10080).
    discord_thread_archive_minutes: int = 1440
    # Seconds between messages in one Discord channel, shared by every worker.
    discord_channel_pace_secs: float = Field(default=0.5, ge=0.0)
    # Seconds between requests of the whole bot (Discord allows about 50/s).
    discord_global_pace_secs: float = Field(default=0.02, ge=0.0)
    # Seconds between streamed edits of one message.
    discord_stream_interval: float = Field(default=1.0, ge=0.2)
    # A 429 longer than this is not slept through: the sender raises SendRateLimited.
    discord_max_retry_wait: float = Field(default=30.0, ge=30.0)
    # Seconds one REST call may take (discord.py alone keeps aiohttp's 5 minutes).
    discord_http_timeout: float = Field(default=15.0, gt=0, le=300)
    # Catch-up after a non-resumable reconnect: conversations active within this many
    # seconds are re-read from their last seen message.
    discord_catchup_window_secs: int = Field(default=86_400, ge=60)
    # Messages fetched per conversation at most during one catch-up.
    discord_catchup_max_messages: int = Field(default=200, ge=1, le=1000)
    # Seconds to wait before a new IDENTIFY after a session was lost (Discord allows
    # one IDENTIFY per 5 s per rate-limit bucket).
    discord_reidentify_delay: float = Field(default=5.0, ge=0.0)
    # Seconds the gateway waits for the GUILD_CREATE burst after READY.
    discord_guild_ready_timeout: float = Field(default=2.0, ge=0.0)
    # Register Parley's commands as Discord slash commands (global application
    # commands) when the gateway starts; off: leave the application's commands as they are.
    discord_commands: bool = True

    @field_validator("discord_bot_token")
    @classmethod
    def _token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None or not v.get_secret_value().strip():
            return None
        raw = v.get_secret_value().strip()
        if raw.lower().startswith("bot "):
            raw = raw[4:].strip()
        return SecretStr(header_safe(raw))  # no space, control or non-ASCII character

    @field_validator("discord_api_base_url")
    @classmethod
    def _base(cls, v: str) -> str:
        v = v.strip() or DEFAULT_API_BASE_URL
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL")
        return v.rstrip("/")

    @field_validator("discord_gateway_url")
    @classmethod
    def _gateway(cls, v: str) -> str:
        v = v.strip()
        if v and not v.startswith(("ws://", "wss://")):
            raise ValueError("must be a ws:// or wss:// URL")
        return v

    @field_validator("discord_shards")
    @classmethod
    def _shards(cls, v: str) -> str:
        v = v.strip().lower() or "auto"
        if not _SHARDS_RE.match(v):
            raise ValueError('must be auto, a shard count, or "ids/count" like 0-3/8')
        parse_shards(v)
        return v

    @field_validator("discord_thread_archive_minutes")
    @classmethod
    def _archive(cls, v: int) -> int:
        if v not in (60, 1440, 4320, 10080):
            raise ValueError("must be 60, 1440, 4320 or 10080")
        return v


def parse_shards(spec: str) -> tuple[list[int] | None, int | None]:
    """``auto`` -> (None, None); ``4`` -> (None, 4); ``0-1,3/8`` -> ([0, 1, 3], 8)."""
    spec = spec.strip().lower()
    if spec == "auto":
        return None, None
    if "/" not in spec:
        count = int(spec)
        if count < 1:
            raise ValueError("shard count must be at least 1")
        return None, count
    ids_part, count_part = spec.split("/", 1)
    count = int(count_part)
    ids: list[int] = []
    for piece in ids_part.split(","):
        piece = piece.strip()
        if not piece:
            continue
        if "-" in piece:
            lo, hi = (int(x) for x in piece.split("-", 1))
            ids.extend(range(lo, hi + 1))
        else:
            ids.append(int(piece))
    if not ids or count < 1 or any(i < 0 or i >= count for i in ids):
        raise ValueError("shard ids must lie in 0..count-1")
    return sorted(set(ids)), count


def gateway_lease(spec: str) -> str:
    """The gateway lease's name for ``DISCORD_SHARDS=spec``: one per shard set."""
    ids, count = parse_shards(spec)
    if ids is None:
        return "discord"
    return f"discord:{','.join(map(str, ids))}/{count}"
