from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest

from agent_core.errors import ConfigError
from agent_core.llm.settings import LLMSettings
from agent_core.settings import PLAINTEXT_SECRETS, CoreSettings, load


def test_secret_from_file_when_env_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "key"
    f.write_text("sk-from-file\n")
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(f))
    s = load(LLMSettings)
    assert s.openai_api_key is not None
    assert s.openai_api_key.get_secret_value() == "sk-from-file"


def test_env_beats_file_beats_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "key"
    f.write_text("from-file")
    env = tmp_path / ".env"
    env.write_text("OPENAI_API_KEY=from-dotenv\nANTHROPIC_API_KEY=dotenv-only\n")
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(f))
    s = LLMSettings(_env_file=str(env))  # type: ignore[call-arg]
    assert s.openai_api_key is not None
    assert s.openai_api_key.get_secret_value() == "from-file"
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    s = LLMSettings(_env_file=str(env))  # type: ignore[call-arg]
    assert s.openai_api_key is not None
    assert s.openai_api_key.get_secret_value() == "from-env"
    # a secret that came from the plaintext .env is reported
    assert s.anthropic_api_key is not None
    assert "ANTHROPIC_API_KEY" in PLAINTEXT_SECRETS


def test_unreadable_secret_file_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY_FILE", "/nonexistent/key")
    with pytest.raises(ConfigError) as exc:
        load(LLMSettings)
    assert exc.value.problems == [
        "OPENAI_API_KEY_FILE: cannot read '/nonexistent/key' (No such file or directory)"
    ]


def test_invalid_settings_give_one_readable_line_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "eighty")
    monkeypatch.setenv("WORKER_CONCURRENCY", "0")
    monkeypatch.setenv("REDIS_URL", "http://example.com")
    with pytest.raises(ConfigError) as exc:
        load(CoreSettings)
    lines = exc.value.problems
    assert len(lines) == 3
    assert any(line.startswith("PORT:") and "whole number" in line for line in lines)
    assert any(line.startswith("WORKER_CONCURRENCY:") for line in lines)
    assert any(line.startswith("REDIS_URL:") and "redis://" in line for line in lines)
    assert all("eighty" not in line for line in lines)


def test_unknown_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_BACKEND", "gpt5000")
    with pytest.raises(ConfigError) as exc:
        load(LLMSettings)
    assert exc.value.problems[0].startswith("LLM_BACKEND: unknown backend 'gpt5000'")


def test_backend_aliases_and_auto_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_BACKEND", "Claude")
    assert load(LLMSettings).llm_backend == "anthropic"
    monkeypatch.delenv("LLM_BACKEND")
    assert load(LLMSettings).resolve_backend()[0] == "demo"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    assert load(LLMSettings).resolve_backend()[0] == "anthropic"
    monkeypatch.setenv("OPENAI_API_KEY", "y")
    assert load(LLMSettings).resolve_backend() == (
        "openai",
        "OPENAI_API_KEY is set; ANTHROPIC_API_KEY ignored (LLM_BACKEND chooses)",
    )


def test_document_readers_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load(CoreSettings)
    assert (s.document_readers, s.document_memory_mb) == (2, 512)
    monkeypatch.setenv("DOCUMENT_READERS", "1")
    monkeypatch.setenv("DOCUMENT_MEMORY_MB", "256")
    s = load(CoreSettings)
    assert (s.document_readers, s.document_memory_mb) == (1, 256)
    for name, bad in (
        ("DOCUMENT_READERS", "0"),
        ("DOCUMENT_MEMORY_MB", "64"),
        ("DOCUMENT_READERS", "a"),
    ):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ConfigError) as exc:
            load(CoreSettings)
        assert [p.split(":")[0] for p in exc.value.problems] == [name]
        monkeypatch.setenv(name, "1" if name == "DOCUMENT_READERS" else "256")


def test_attachment_memory_budget_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load(CoreSettings).attachment_memory_bytes == 100_000_000
    monkeypatch.setenv("ATTACHMENT_MEMORY_BYTES", "25000000")
    assert load(CoreSettings).attachment_memory_bytes == 25_000_000
    monkeypatch.setenv("ATTACHMENT_MEMORY_BYTES", "0")  # no budget
    assert load(CoreSettings).attachment_memory_bytes == 0
    for bad in ("-1", "lots"):
        monkeypatch.setenv("ATTACHMENT_MEMORY_BYTES", bad)
        with pytest.raises(ConfigError) as exc:
            load(CoreSettings)
        assert [p.split(":")[0] for p in exc.value.problems] == ["ATTACHMENT_MEMORY_BYTES"]


def test_a_mistyped_setting_is_named_with_the_closest_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """TELEGRAM_TOKEN (for TELEGRAM_BOT_TOKEN), in the environment or in .env: one
    warning at start naming the real setting; names of other tools (OPENAI_ORG_ID,
    Heroku's WEB_CONCURRENCY) and real settings' _FILE forms say nothing."""
    from bots.settings import load_settings

    env = tmp_path / ".env"
    env.write_text("LLM_MODLE=gpt-4o\nSHELL_TOOL_ENV=SLACK_WEBHOOK_URL\n")
    import bots.settings as bs

    monkeypatch.setattr(bs, "ENV_FILE", str(env))
    monkeypatch.setenv("TELEGRAM_TOKEN", "123:abc")
    monkeypatch.setenv("OPENAI_ORG_ID", "org")
    monkeypatch.setenv("WEB_CONCURRENCY", "2")
    monkeypatch.setenv("SLACK_BOT_TOKEN_FILE", str(tmp_path / "missing"))
    monkeypatch.setenv("PARLEY_SOMETHING_ELSE", "1")
    monkeypatch.setenv("LLM_MODEL_FILE", "/run/secrets/model")  # not a secret: no _FILE
    monkeypatch.setenv("SLACK_WEBHOOK_URL", "https://hooks.example")  # for the shell tool
    # the missing _FILE is a problem of its own
    with caplog.at_level(logging.WARNING, logger="bots.settings"), contextlib.suppress(ConfigError):
        load_settings()
    lines = [r.getMessage() for r in caplog.records if r.name == "bots.settings"]
    assert lines == [
        "LLM_MODEL_FILE is not a Parley setting; it is ignored (did you mean LLM_MODEL?)",
        "LLM_MODLE is not a Parley setting; it is ignored (did you mean LLM_MODEL?)",
        "PARLEY_SOMETHING_ELSE is not a Parley setting; it is ignored",
        "TELEGRAM_TOKEN is not a Parley setting; it is ignored (did you mean TELEGRAM_BOT_TOKEN?)",
    ]


@pytest.mark.parametrize("bad", ["telgram:123", "telegram", "slack:T01//C1", "web:a/b"])
def test_a_mistyped_heartbeat_target_stops_startup_with_one_line(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("HEARTBEAT_NOTIFY", bad)
    with pytest.raises(ConfigError) as exc:
        load(CoreSettings)
    assert len(exc.value.problems) == 1
    line = exc.value.problems[0]
    assert line.startswith("HEARTBEAT_NOTIFY: target ") and "\n" not in line, line


@pytest.mark.parametrize("good", ["", "telegram:123", "slack:C0123", "slack:T01/C1", "web:s1"])
def test_heartbeat_targets_that_load(monkeypatch: pytest.MonkeyPatch, good: str) -> None:
    monkeypatch.setenv("HEARTBEAT_NOTIFY", good)
    assert load(CoreSettings).heartbeat_notify == good
