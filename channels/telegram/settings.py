"""Telegram settings: every ``TELEGRAM_*`` variable (see docs/telegram.md)."""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from agent_core.settings import ParleySettings, http_url

_TOKEN_RE = re.compile(r"\d+:[A-Za-z0-9_-]+")
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")
MIN_WEBHOOK_SECRET_CHARS = 16  # shorter webhook secrets get a start-up warning

DEFAULT_BASE_URL = "https://api.telegram.org/bot"


class TelegramSettings(ParleySettings):
    telegram_bot_token: SecretStr | None = Field(
        default=None, description="Bot token from @BotFather; enables the channel"
    )
    # "" = automatic: webhook when PUBLIC_URL is set, polling otherwise.
    telegram_mode: str = ""
    telegram_webhook_secret: SecretStr | None = None
    telegram_api_base_url: str = DEFAULT_BASE_URL
    # Where files are downloaded from; "" = derived from TELEGRAM_API_BASE_URL
    # (".../bot" -> ".../file/bot").
    telegram_api_file_url: str = ""
    telegram_connection_pool_size: int = Field(default=64, ge=1, le=4096)
    telegram_edited_messages: str = "ignore"  # ignore | reply
    # Set the bot's command menu (the list shown when typing "/") to Parley's
    # commands at start; off: leave the list as BotFather has it.
    telegram_command_menu: bool = True
    telegram_max_body_bytes: int = Field(default=1_000_000, ge=1024)
    telegram_poll_timeout: int = Field(default=30, ge=0, le=50)
    # A send that Telegram rate-limits waits each retry_after out (the chat is
    # paused that long anyway); one refused again after waiting this long in all
    # raises SendRateLimited.
    telegram_max_retry_wait: float = Field(default=60.0, ge=0)
    # Pacing, shared by every worker through Redis (Telegram's published limits
    # by default).  0 turns a pace off (test servers, local Bot API servers).
    telegram_chat_interval_secs: float = Field(default=1.0, ge=0, le=60)
    telegram_group_interval_secs: float = Field(default=3.0, ge=0, le=60)
    telegram_global_rate: float = Field(default=30.0, ge=0, le=10_000)

    @field_validator("telegram_bot_token")
    @classmethod
    def _token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None or not v.get_secret_value().strip():
            return None
        raw = v.get_secret_value().strip()
        if not _TOKEN_RE.fullmatch(raw):
            raise ValueError(
                "malformed bot token: expected <digits>:<letters> as given by @BotFather"
            )
        return SecretStr(raw)

    @field_validator("telegram_webhook_secret")
    @classmethod
    def _secret(cls, v: SecretStr | None) -> SecretStr | None:
        # surrounding whitespace (an env var ending in a newline) is not part of it
        raw = v.get_secret_value().strip() if v is not None else ""
        if not raw:
            return None
        if not _SECRET_RE.fullmatch(raw):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and -")
        return SecretStr(raw)

    @field_validator("telegram_api_base_url", "telegram_api_file_url")
    @classmethod
    def _urls(cls, v: str, info: ValidationInfo) -> str:
        # the base URL has a default (an empty value is unset); the file URL may be ""
        required = info.field_name == "telegram_api_base_url"
        return http_url(v, required=required, credentials="remove them")

    @field_validator("telegram_mode")
    @classmethod
    def _mode(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in ("", "webhook", "polling"):
            raise ValueError("must be webhook or polling (or empty for automatic)")
        return v

    @field_validator("telegram_edited_messages")
    @classmethod
    def _edited(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in ("ignore", "reply"):
            raise ValueError("must be ignore or reply")
        return v

    @property
    def token(self) -> str:
        return self.telegram_bot_token.get_secret_value() if self.telegram_bot_token else ""

    @property
    def bot_id(self) -> str:
        """The bot's numeric id: the part of the token before ':' (not secret)."""
        return self.token.split(":", 1)[0]

    @property
    def file_url(self) -> str:
        if self.telegram_api_file_url:
            return self.telegram_api_file_url
        base = self.telegram_api_base_url
        if base.endswith("/bot"):
            return base[: -len("/bot")] + "/file/bot"
        return base.rstrip("/") + "/file/bot"

    def resolved_mode(self, public_url: str) -> str:
        """webhook | polling: explicit TELEGRAM_MODE, else webhook iff PUBLIC_URL is set."""
        if self.telegram_mode:
            return self.telegram_mode
        return "webhook" if public_url else "polling"
