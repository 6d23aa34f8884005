"""Secrets and the .env file: a <NAME>_FILE line there is read (below the
environment), and the plaintext warning names only secrets actually taken from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.errors import ConfigError
from agent_core.llm.settings import LLMSettings
from agent_core.settings import PLAINTEXT_SECRETS, CoreSettings, load


def test_a_secret_file_named_in_dotenv_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: every option is an environment variable "also read from an optional
    .env file", and every secret "can instead be given as <NAME>_FILE".  A
    <NAME>_FILE line in .env is silently ignored (SecretFileSource reads only
    os.environ): no key, no warning, and the agent falls back to the demo model."""
    for name in ("OPENAI_API_KEY", "OPENAI_API_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    key = tmp_path / "openai"
    key.write_text("sk-from-secret-file\n")
    env = tmp_path / ".env"
    env.write_text(f"OPENAI_API_KEY_FILE={key}\n")
    s = LLMSettings(_env_file=str(env))  # type: ignore[call-arg]
    assert s.openai_api_key is not None, "OPENAI_API_KEY_FILE in .env was ignored"
    assert s.openai_api_key.get_secret_value() == "sk-from-secret-file"


def test_a_secret_taken_from_the_environment_is_not_reported_as_read_from_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start-up summary warns "<NAME> is read from the plaintext .env file" for
    every secret that *appears* in .env, even when the environment (or <NAME>_FILE)
    supplies the value actually used (WarningDotEnvSource looks at the .env source
    alone, before precedence is applied)."""
    PLAINTEXT_SECRETS.clear()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    env = tmp_path / ".env"
    env.write_text("OPENAI_API_KEY=sk-stale-copy-in-dotenv\n")
    s = LLMSettings(_env_file=str(env))  # type: ignore[call-arg]
    assert s.openai_api_key is not None
    assert s.openai_api_key.get_secret_value() == "sk-from-the-environment"
    assert "OPENAI_API_KEY" not in PLAINTEXT_SECRETS


def test_the_environments_file_ranks_above_the_dotenv_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    env_key, dotenv_key = tmp_path / "env-key", tmp_path / "dotenv-key"
    env_key.write_text("sk-env-file")
    dotenv_key.write_text("sk-dotenv-file")
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(env_key))
    env = tmp_path / ".env"
    env.write_text(f"OPENAI_API_KEY_FILE={dotenv_key}\n")
    s = LLMSettings(_env_file=str(env))  # type: ignore[call-arg]
    assert s.openai_api_key is not None
    assert s.openai_api_key.get_secret_value() == "sk-env-file"


def test_a_dotenv_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """A .env saved as Latin-1 by a Windows editor (an accent in AGENT_NAME): a
    ConfigError naming the file and the byte, not a UnicodeDecodeError."""
    env = tmp_path / ".env"
    env.write_bytes(b"AGENT_NAME=Ren\xe9\nDM_POLICY=open\n")
    with pytest.raises(ConfigError) as exc:
        load(CoreSettings, _env_file=str(env))
    assert exc.value.problems == [f"{env}: is not UTF-8 text (byte 15); save it as UTF-8"]


def test_load_settings_reports_a_non_utf8_dotenv_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every settings class reads the .env file: the line is said once, not once each."""
    import bots.settings as bs

    env = tmp_path / ".env"
    env.write_bytes(b"SYSTEM_PROMPT=Be nice\x92s\n")
    monkeypatch.setattr(bs, "ENV_FILE", str(env))
    with pytest.raises(ConfigError) as exc:
        bs.load_settings()
    assert exc.value.problems == [f"{env}: is not UTF-8 text (byte 22); save it as UTF-8"]
