"""DISCORD_* settings."""

from __future__ import annotations

import pytest

from agent_core.errors import ConfigError
from agent_core.settings import load
from channels.discord import status
from channels.discord.settings import DiscordSettings, parse_shards


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load(DiscordSettings)
    assert s.discord_bot_token is None
    assert s.discord_api_base_url == "https://discord.com/api/v10"
    assert s.discord_gateway_url == ""
    assert status(s) == (False, "DISCORD_BOT_TOKEN not set")


def test_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "Bot abc.def")
    monkeypatch.setenv("DISCORD_API_BASE_URL", "http://127.0.0.1:1/api/v10/")
    monkeypatch.setenv("DISCORD_GATEWAY_URL", "ws://127.0.0.1:1/gateway")
    monkeypatch.setenv("DISCORD_SHARDS", "0-1/4")
    s = load(DiscordSettings)
    assert s.discord_bot_token is not None and s.discord_bot_token.get_secret_value() == "abc.def"
    assert s.discord_api_base_url == "http://127.0.0.1:1/api/v10"
    assert status(s)[0]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("auto", (None, None)), ("3", (None, 3)), ("0-2,5/8", ([0, 1, 2, 5], 8)), ("1/2", ([1], 2))],
)
def test_shards(spec: str, expected: object) -> None:
    assert parse_shards(spec) == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DISCORD_SHARDS", "4/4"),
        ("DISCORD_SHARDS", "lots"),
        ("DISCORD_GATEWAY_URL", "http://x"),
        ("DISCORD_THREAD_ARCHIVE_MINUTES", "5"),
    ],
)
def test_bad_values_are_one_line_each(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        load(DiscordSettings)
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith(name)
    assert value not in err.value.problems[0] or name != "DISCORD_BOT_TOKEN"
