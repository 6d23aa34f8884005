"""Slack settings: every ``SLACK_*`` variable (see docs/slack.md)."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from agent_core.settings import MAX_TTL_SECS, ParleySettings

DEFAULT_API_BASE_URL = "https://slack.com/api/"


class SlackSettings(ParleySettings):
    # Bot token (xoxb-...): every Web API call.
    slack_bot_token: SecretStr | None = None
    # Signing secret: enables the Events API route POST /slack/events (web process).
    slack_signing_secret: SecretStr | None = None
    # App-level token (xapp-..., scope connections:write): enables Socket Mode (gateway process).
    slack_app_token: SecretStr | None = None
    # Web API base URL (slack_sdk base_url), for tests and proxies.
    slack_api_base_url: str = DEFAULT_API_BASE_URL
    # The slash command Parley answers (as configured in the Slack app).
    slack_slash_command: str = "/parley"
    # Seconds between streamed edits of one message.
    slack_stream_interval: float = Field(default=1.0, ge=0.1)
    # Seconds between messages in one Slack channel, shared by every worker process.
    slack_channel_pace_secs: float = Field(default=1.0, ge=0.0)
    # How long Parley remembers a thread it takes part in (follow-ups need no mention).
    slack_thread_ttl_secs: int = Field(default=7 * 86_400, ge=60, le=MAX_TTL_SECS)  # SET EX
    # Reaction shown on the user's message while a turn runs; empty disables it.
    slack_working_reaction: str = "eyes"
    # Socket Mode: ping interval in seconds; a socket without pong is replaced.
    slack_socket_ping_interval: float = Field(default=10.0, gt=0)
    # Web API timeout in seconds.
    slack_http_timeout: int = Field(default=15, ge=1)
    # Largest POST /slack/events body accepted; larger ones get 413 unread.
    slack_max_body_bytes: int = Field(default=1024 * 1024, ge=16 * 1024)

    @field_validator("slack_slash_command")
    @classmethod
    def _slash(cls, v: str) -> str:
        v = v.strip()
        if v and not v.startswith("/"):
            v = "/" + v
        return v

    @field_validator("slack_working_reaction")
    @classmethod
    def _reaction(cls, v: str) -> str:
        # Slack's reactions.add takes the bare name: ":eyes:" as written in Slack -> "eyes"
        return v.strip().strip(":").strip()

    @field_validator("slack_api_base_url")
    @classmethod
    def _base(cls, v: str) -> str:
        v = v.strip() or DEFAULT_API_BASE_URL
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL")
        return v if v.endswith("/") else v + "/"

    @field_validator("slack_app_token")
    @classmethod
    def _app_token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None or not v.get_secret_value().strip():
            return None
        if not v.get_secret_value().strip().startswith("xapp-"):
            raise ValueError("must be an app-level token starting with xapp-")
        return SecretStr(v.get_secret_value().strip())

    @field_validator("slack_bot_token", "slack_signing_secret")
    @classmethod
    def _blank(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None or not v.get_secret_value().strip():
            return None
        return SecretStr(v.get_secret_value().strip())

    def secret(self, name: str) -> str:
        value: SecretStr | None = getattr(self, name)
        return "" if value is None else value.get_secret_value()
