"""METRICS_TOKEN and METRICS_ENABLED: read like every other secret and flag, never
shown, redacted from logs, and what doctor / release say about /metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.errors import ConfigError
from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings, load
from bots.ops import metrics_warning
from bots.settings import Settings, known_names, unknown_names
from channels.web.channel import WebSettings

TOKEN = "metrics-SECRET-token-0123456789"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("METRICS_TOKEN", "METRICS_TOKEN_FILE", "METRICS_ENABLED", "DYNO"):
        monkeypatch.delenv(name, raising=False)


def _core(**kw: object) -> CoreSettings:
    return load(CoreSettings, _env_file=None, **kw)


def _settings(core: CoreSettings) -> Settings:
    return Settings(core=core, llm=LLMSettings(llm_backend="demo"), web=WebSettings())


def test_unset_metrics_are_on_and_open() -> None:
    core = _core()
    assert core.metrics_enabled is True and core.metrics_token is None


def test_the_token_is_a_secret_from_the_environment_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("METRICS_TOKEN", f"  {TOKEN}\n")  # a paste's whitespace is dropped
    core = _core()
    assert core.metrics_token is not None
    assert core.metrics_token.get_secret_value() == TOKEN
    assert TOKEN not in repr(core) and TOKEN not in str(core.model_dump())
    monkeypatch.delenv("METRICS_TOKEN")
    f = tmp_path / "metrics-token"
    f.write_text(TOKEN + "\n")
    monkeypatch.setenv("METRICS_TOKEN_FILE", str(f))
    token = _core().metrics_token
    assert token is not None and token.get_secret_value() == TOKEN
    monkeypatch.delenv("METRICS_TOKEN_FILE")
    monkeypatch.setenv("METRICS_TOKEN", "   ")  # blank: unset
    assert _core().metrics_token is None


def test_a_token_no_header_can_carry_stops_the_start_in_one_line_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("METRICS_TOKEN", "metrics token\u00a0with spaces")
    monkeypatch.setenv("METRICS_ENABLED", "perhaps")
    with pytest.raises(ConfigError) as exc:
        _core()
    lines = exc.value.problems
    assert len(lines) == 2, lines
    token_line = next(line for line in lines if line.startswith("METRICS_TOKEN:"))
    assert "HTTP header" in token_line and "with spaces" not in token_line
    enabled_line = next(line for line in lines if line.startswith("METRICS_ENABLED:"))
    assert "true or false" in enabled_line


def test_metrics_enabled_false_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METRICS_ENABLED", "false")
    assert _core().metrics_enabled is False


def test_the_token_is_redacted_from_logs() -> None:
    s = _settings(CoreSettings(metrics_token=TOKEN))  # type: ignore[arg-type]
    assert TOKEN in s.secret_values()


def test_names_are_known_and_a_typo_is_named() -> None:
    known = known_names([CoreSettings])
    assert {"METRICS_TOKEN", "METRICS_TOKEN_FILE", "METRICS_ENABLED"} <= known
    assert unknown_names(["METRICS_TOKEN", "METRICS_ENABLED"], known) == []
    [line] = unknown_names(["METRICS_TOKN"], known)
    assert "did you mean METRICS_TOKEN?" in line


def test_doctor_and_release_warn_of_public_metrics_on_a_dyno_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    open_ = _settings(CoreSettings())
    assert metrics_warning(open_) == ""  # a laptop: nothing to say
    monkeypatch.setenv("DYNO", "web.1")
    said = metrics_warning(open_)
    assert said.startswith("/metrics is public") and "METRICS_TOKEN" in said, said
    assert metrics_warning(_settings(CoreSettings(metrics_token=TOKEN))) == ""  # type: ignore[arg-type]
    assert metrics_warning(_settings(CoreSettings(metrics_enabled=False))) == ""


def test_a_short_token_is_a_warning_that_does_not_show_it() -> None:
    said = metrics_warning(_settings(CoreSettings(metrics_token="abc123xyz")))  # type: ignore[arg-type]
    assert "9 characters long" in said and "at least 16" in said, said
    assert "abc123xyz" not in said
    long_enough = CoreSettings(metrics_token="x" * 16)  # type: ignore[arg-type]
    assert metrics_warning(_settings(long_enough)) == ""
