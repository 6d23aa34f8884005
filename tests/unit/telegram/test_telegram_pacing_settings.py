"""TELEGRAM_* pacing settings reach the sender's Limits (defaults = Telegram's limits)."""

from __future__ import annotations

import pytest

from channels.telegram.channel import limits_for
from channels.telegram.settings import TelegramSettings


def test_defaults_are_telegrams_published_limits() -> None:
    lim = limits_for(TelegramSettings())
    assert (lim.chat_interval, lim.group_interval) == (1.0, 3.0)
    assert lim.global_interval == pytest.approx(1 / 30)


def test_settings_change_the_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_CHAT_INTERVAL_SECS", "0")
    monkeypatch.setenv("TELEGRAM_GROUP_INTERVAL_SECS", "0.5")
    monkeypatch.setenv("TELEGRAM_GLOBAL_RATE", "100")
    lim = limits_for(TelegramSettings())
    assert (lim.chat_interval, lim.group_interval) == (0.0, 0.5)
    assert lim.global_interval == pytest.approx(0.01)
    monkeypatch.setenv("TELEGRAM_GLOBAL_RATE", "0")
    assert limits_for(TelegramSettings()).global_interval == 0.0


def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_GLOBAL_RATE", "-1")
    with pytest.raises(ValueError, match="telegram_global_rate"):
        TelegramSettings()
