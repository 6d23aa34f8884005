from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent_core.errors import ConfigError
from agent_core.llm.settings import LLMSettings
from agent_core.settings import PLAINTEXT_SECRETS, CoreSettings, is_secret, load


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
        "OPENAI_API_KEY_FILE: cannot read the file it names (No such file or directory); "
        "it must be the path of a file holding the secret, not the secret itself (that "
        "goes in OPENAI_API_KEY)"
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


@pytest.mark.parametrize("name", ["ADMIN_IDS", "APPROVER_IDS", "ALLOWED_USERS"])
@pytest.mark.parametrize("bad", ["123456789", "tg:123456789", "telegram:", " :5"])
def test_a_user_id_without_its_channel_stops_startup_with_one_line(
    monkeypatch: pytest.MonkeyPatch, name: str, bad: str
) -> None:
    """A bare Telegram id matched nobody, silently: a bare ADMIN_IDS / APPROVER_IDS
    still counted as 'an approver is configured' (nobody in a group could /new), a
    bare ALLOWED_USERS silenced every group."""
    monkeypatch.setenv(name, f"slack:U01,{bad}")
    with pytest.raises(ConfigError) as exc:
        load(CoreSettings)
    assert exc.value.problems == [
        f"{name}: {bad.strip()!r} is not <channel>:<id>; expected e.g. telegram:123456789 "
        "(channel: telegram, slack, discord, web or console)"
    ]


def test_user_ids_take_the_channel_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADMIN_IDS", " Telegram:123 , SLACK:U0123ABCD,discord: 42 ")
    s = load(CoreSettings)
    assert s.id_list(s.admin_ids) == {"telegram:123", "slack:U0123ABCD", "discord:42"}


def test_load_settings_refuses_a_bare_admin_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from bots.settings import load_settings

    monkeypatch.setenv("ADMIN_IDS", "123456789")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert [p for p in exc.value.problems if p.startswith("ADMIN_IDS:")] == [
        "ADMIN_IDS: '123456789' is not <channel>:<id>; expected e.g. telegram:123456789 "
        "(channel: telegram, slack, discord, web or console)"
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


# every secret that is sent in a header or URL, and a value (with a valid shape
# otherwise) into which a bad character is put
_HEADER_SECRETS = {
    "OPENAI_API_KEY": "sk-abcdefghijkl",
    "ANTHROPIC_API_KEY": "sk-ant-abcdefgh",
    "LLM_API_KEY": "sk-abcdefghijkl",
    "OPENROUTER_API_KEY": "sk-or-abcdefghi",
    "GROQ_API_KEY": "gsk_abcdefghijk",
    "TELEGRAM_BOT_TOKEN": "123:abcdefghijk",
    "TELEGRAM_WEBHOOK_SECRET": "abcdefghijklmn",
    "SLACK_BOT_TOKEN": "xoxb-abcdefghij",
    "SLACK_APP_TOKEN": "xapp-abcdefghij",
    "SLACK_SIGNING_SECRET": "abcdefghijklmn",
    "DISCORD_BOT_TOKEN": "abcdefghijklmn",
}


@pytest.mark.parametrize("bad", ["\u00e9", "\u201c", "\u00a0", "\x01", " "])
@pytest.mark.parametrize("name", sorted(_HEADER_SECRETS))
def test_a_secret_a_header_cannot_carry_is_one_line_with_its_position(
    monkeypatch: pytest.MonkeyPatch, name: str, bad: str
) -> None:
    """A pasted curly quote, non-breaking space or control character in a key or
    token stops start-up with one line naming the variable and the position (not a
    traceback from httpx at the first request); the value is never shown."""
    from bots.settings import load_settings

    good = _HEADER_SECRETS[name]
    value = good[:7] + bad + good[7:]
    monkeypatch.setenv(name, "  " + value + "\n")  # surrounding whitespace: dropped
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert exc.value.problems == [
        f"{name}: contains a character that cannot be sent in an HTTP header (position 8): "
        "a space, a control character or a non-ASCII one (a curly quote, a non-breaking "
        "space); retype it"
    ]
    assert good[7:] not in str(exc.value.problems)


def test_a_secret_with_surrounding_whitespace_is_stripped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bots.settings import load_settings

    for name, good in _HEADER_SECRETS.items():
        monkeypatch.setenv(name, "\u00a0" + good + " \n")
    monkeypatch.setenv("WEB_CHAT_TOKEN", "\u00a0abcdefghijklmn \n")
    s = load_settings()
    assert s.llm.openai_api_key is not None
    assert s.llm.openai_api_key.get_secret_value() == _HEADER_SECRETS["OPENAI_API_KEY"]
    assert s.platforms["slack"].secret("slack_bot_token") == _HEADER_SECRETS["SLACK_BOT_TOKEN"]
    assert s.web.web_chat_token is not None
    assert s.web.web_chat_token.get_secret_value() == "abcdefghijklmn"
    # a blank key is unset, as an empty one is
    monkeypatch.setenv("OPENAI_API_KEY", "  ")
    assert load(LLMSettings).openai_api_key is None


def test_every_secret_is_checked_for_header_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret added later is checked too, unless it is declared as never sent."""
    from bots.settings import PLATFORMS, _channel_module
    from channels.web.channel import WebSettings

    classes = [CoreSettings, LLMSettings, WebSettings]
    classes += [m.SETTINGS for n in PLATFORMS if (m := _channel_module(n)) is not None]
    secrets = {n for c in classes for n, f in c.model_fields.items() if is_secret(f)}
    assert secrets - CoreSettings.UNSENT_SECRETS >= {n.lower() for n in _HEADER_SECRETS}
    assert {"redis_url", "web_chat_secret"} == CoreSettings.UNSENT_SECRETS
    for cls in classes:
        for name, f in cls.model_fields.items():
            if is_secret(f) and name not in cls.UNSENT_SECRETS:
                with pytest.raises(ValidationError, match="position 3"):
                    cls(**{name: "ab\u00e9cd"})
    # DISCORD_BOT_TOKEN's own validator checks it, after its "Bot " prefix
    from channels.discord.settings import DiscordSettings

    monkeypatch.setenv("DISCORD_BOT_TOKEN", "Bot abc.def")
    token = load(DiscordSettings).discord_bot_token
    assert token is not None and token.get_secret_value() == "abc.def"


def test_extra_headers_a_request_cannot_carry_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLM_EXTRA_HEADERS", "X-Title:Parley,Authorization:Bearer sk-\u201cabc")
    with pytest.raises(ConfigError) as exc:
        load(LLMSettings)
    assert exc.value.problems == [
        "LLM_EXTRA_HEADERS: header 2's value contains a character that cannot be sent in an "
        "HTTP header (position 11): a control character or a non-ASCII one (a curly quote, "
        "a non-breaking space); retype it"
    ]
    monkeypatch.setenv("LLM_EXTRA_HEADERS", "X-Title:My Parley")  # a space in a value is fine
    assert load(LLMSettings).extra_headers() == {"X-Title": "My Parley"}


@pytest.mark.parametrize(
    ("backend", "own"),
    [("openai", "OPENAI_MODEL"), ("anthropic", "ANTHROPIC_MODEL"), ("ollama", "OLLAMA_MODEL")],
)
def test_llm_model_applies_to_the_vendor_backends_unless_their_own_is_set(
    monkeypatch: pytest.MonkeyPatch, backend: str, own: str
) -> None:
    from agent_core.llm.config import backend_config

    monkeypatch.setenv("LLM_BACKEND", backend)
    monkeypatch.setenv(f"{backend.upper()}_API_KEY", "sk-test")
    monkeypatch.setenv("LLM_MODEL", "model-from-llm-model")
    assert backend_config(load(LLMSettings)).model == "model-from-llm-model"
    monkeypatch.setenv(own, "model-of-its-own")  # the specific variable wins
    assert backend_config(load(LLMSettings)).model == "model-of-its-own"


def test_llm_model_is_not_a_fallbacks_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The primary's LLM_MODEL (an OpenRouter name) is not sent to a bare openai
    fallback: that takes OPENAI_MODEL or its default."""
    from agent_core.llm.config import backend_config

    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("LLM_BACKEND", "openrouter")
    monkeypatch.setenv("LLM_MODEL", "anthropic/claude-sonnet-4")
    s = load(LLMSettings)
    assert backend_config(s).model == "anthropic/claude-sonnet-4"
    assert backend_config(s, "openai").model == "gpt-4o"
    # the openai key alone chooses openai: LLM_MODEL is its model
    monkeypatch.delenv("LLM_BACKEND")
    monkeypatch.delenv("OPENROUTER_API_KEY")
    monkeypatch.setenv("LLM_MODEL", "gpt-4o-mini")
    assert backend_config(load(LLMSettings)).model == "gpt-4o-mini"


def test_typos_of_every_parley_prefix_are_named(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OPENAI_, ANTHROPIC_, OLLAMA_, REDIS_, WEB_CHAT_, DM_ and the presets' prefixes
    are checked too; what the vendors' tools, the Ollama server and Heroku Redis set
    in the same environment is not warned about."""
    from bots.settings import load_settings

    for name in (
        "WEB_CHAT_TOKN",
        "REDIS_URI",
        "OPENAI_KEY",
        "ANTHROPIC_KEY",
        "OLLAMA_MODLE",
        "DM_POLICIES",
        "GROQ_MODEL",
        "REDIS_HOST",
        # other software's: silent
        "REDIS_TLS_URL",
        "OLLAMA_MODELS",
        "OLLAMA_HOST",
        "OLLAMA_CONTEXT_LENGTH",
        "OPENAI_ORG_ID",
        "ANTHROPIC_AUTH_TOKEN",
    ):
        monkeypatch.setenv(name, "1")
    with caplog.at_level(logging.WARNING, logger="bots.settings"), contextlib.suppress(ConfigError):
        load_settings()
    lines = [r.getMessage() for r in caplog.records if r.name == "bots.settings"]
    ignored = "is not a Parley setting; it is ignored"
    assert lines == [
        f"ANTHROPIC_KEY {ignored} (did you mean ANTHROPIC_API_KEY?)",
        f"DM_POLICIES {ignored} (did you mean DM_POLICY?)",
        f"GROQ_MODEL {ignored} (a preset's model is LLM_MODEL)",
        f"OLLAMA_MODLE {ignored} (did you mean OLLAMA_MODEL?)",
        f"OPENAI_KEY {ignored} (did you mean OPENAI_API_KEY?)",
        f"REDIS_HOST {ignored} (Parley reads only REDIS_URL: redis://[:password@]host:port[/db])",
        f"REDIS_URI {ignored} (did you mean REDIS_URL?)",
        f"WEB_CHAT_TOKN {ignored} (did you mean WEB_CHAT_TOKEN?)",
    ]


@pytest.mark.parametrize("name", ["DM_POLICY", "GROUP_POLICY"])
def test_an_unknown_access_policy_stops_startup_with_one_line(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "everyone")
    with pytest.raises(ConfigError) as exc:
        load(CoreSettings)
    assert len(exc.value.problems) == 1
    line = exc.value.problems[0]
    assert line.startswith(f"{name}: ") and "open, allowlist or pairing" in line, line
    assert "\n" not in line


def test_group_policy_defaults_to_pairing_and_takes_any_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load(CoreSettings).group_policy == "pairing"
    monkeypatch.setenv("GROUP_POLICY", " Open ")
    assert load(CoreSettings).group_policy == "open"
