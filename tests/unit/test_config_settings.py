"""Configuration and first run: settings that are refused at load with one line
naming the variable, secrets that never reach the output, and the choices made
when a variable is left out (bind address, web chat, LLM backend)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from unittest.mock import MagicMock

import pytest

from agent_core.errors import ConfigError
from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings, load

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PORT", "DYNO", "HOST", "WEB_CHAT_ENABLED", "LLM_BACKEND", "LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


# --- secrets in output ---------------------------------------------------------------


def test_llm_extra_headers_error_does_not_echo_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """LLM_EXTRA_HEADERS carries auth headers: a typo ("Authorization Bearer ..."
    instead of "Authorization:Bearer ...") names the variable and the form, not the key."""
    monkeypatch.setenv("LLM_EXTRA_HEADERS", "Authorization Bearer sk-live-SECRET123")
    with pytest.raises(ConfigError) as exc:
        load(LLMSettings)
    text = "\n".join(exc.value.problems)
    assert text.startswith("LLM_EXTRA_HEADERS:")
    assert "SECRET123" not in text, text


def test_redis_url_with_password_in_user_position_is_redacted() -> None:
    """`redis://PASSWORD@host` (colon forgotten) is shown as `redis://***@host`."""
    from agent_core.store.client import redact_url

    shown = redact_url("redis://hunter2secret@127.0.0.1:1/0")
    assert "hunter2secret" not in shown, shown
    assert shown == "redis://***@127.0.0.1:1/0"
    assert redact_url("redis://user:pw@h:6379/0") == "redis://user:***@h:6379/0"
    assert redact_url("redis://:pw@h:6379") == "redis://***@h:6379"
    assert redact_url("unix:///tmp/x.sock") == "unix:///tmp/x.sock"


@pytest.mark.parametrize(
    "url",
    [
        "redis://user:pw-SECRET@127.0.0.1:notaport/0",
        "redis://:pw-SECRET@[::1",
        "https://u:pw-SECRET@host:99999999/v1",
        "redis://:pw/with@slash-SECRET@host:1/0",
    ],
)
def test_redact_url_never_raises_and_hides_the_password(url: str) -> None:
    from agent_core.store.client import redact_url

    assert "SECRET" not in redact_url(url)


def test_llm_base_url_with_credentials_is_refused_without_echoing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Credentials in LLM_BASE_URL (user:key@host) cannot work (they would go beside
    the key's Authorization header): refused at load, the value never echoed."""
    monkeypatch.setenv("LLM_BACKEND", "openai_compatible")
    monkeypatch.setenv("LLM_BASE_URL", "https://proxy:sk-proxy-SECRET99@llm.example.com/v1")
    monkeypatch.setenv("LLM_MODEL", "m")
    with pytest.raises(ConfigError) as err:
        load(LLMSettings)
    assert "LLM_BASE_URL" in str(err.value) and "credentials" in str(err.value)
    assert "SECRET99" not in str(err.value)


def test_llm_url_credentials_are_redacted_in_the_description() -> None:
    """describe() redacts a URL's user:key@ all the same (defence in depth)."""
    from agent_core.llm.factory import describe

    settings = load(LLMSettings, llm_backend="openai_compatible", llm_model="m")
    settings.llm_base_url = "https://proxy:sk-proxy-SECRET99@llm.example.com/v1"
    line = describe(settings)
    assert "SECRET99" not in line, line
    assert "https://proxy:***@llm.example.com/v1" in line


def test_url_credentials_are_redacted_in_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    from bots.logs import RedactFilter
    from bots.settings import load_settings

    monkeypatch.setenv("LLM_API_KEY", "sk-proxy-SECRET99")
    monkeypatch.setenv("LLM_BASE_URL", "https://llm.example.com/v1")
    monkeypatch.setenv("LLM_MODEL", "m")
    monkeypatch.setenv("REDIS_URL", "redis://hunter2secret@127.0.0.1:1/0")
    secrets = load_settings().secret_values()
    record = logging.LogRecord(
        "t",
        logging.ERROR,
        __file__,
        1,
        "cannot connect to %s via %s",
        ("https://proxy:sk-proxy-SECRET99@llm.example.com/v1", "redis://hunter2secret@x"),
        None,
    )
    RedactFilter(secrets).filter(record)
    assert "SECRET99" not in record.getMessage()
    assert "hunter2secret" not in record.getMessage()


# --- PORT on a laptop is not "hosted" -----------------------------------------------


def test_setting_port_on_a_laptop_keeps_loopback_and_web_chat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`PORT=8123 parley run` on a laptop (what the port-in-use error tells the user
    to do) still binds 127.0.0.1 and serves the local web chat."""
    from bots.cli import host_for
    from bots.settings import load_settings
    from channels.web import channel as web_channel

    monkeypatch.setenv("PORT", "8123")
    s = load_settings()
    assert host_for(s) == "127.0.0.1"
    on, why = web_channel.status(s.web, False, hosted=s.hosted)
    assert on, why


def test_heroku_binds_all_interfaces_and_keeps_the_web_chat_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bots.cli import host_for
    from bots.settings import load_settings
    from channels.web import channel as web_channel

    monkeypatch.setenv("DYNO", "web.1")
    monkeypatch.setenv("PORT", "31000")
    s = load_settings()
    assert host_for(s) == "0.0.0.0"
    assert not web_channel.status(s.web, False, hosted=s.hosted)[0]


@pytest.mark.parametrize(("host", "exposed"), [("0.0.0.0", True), ("::", True), ("::1", False)])
def test_explicit_host_decides_whether_the_web_chat_is_exposed(
    host: str, exposed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other platforms (Docker, Render, Fly.io) set HOST=0.0.0.0: the port is then
    reachable from other machines, so the web chat is off unless enabled."""
    from bots.cli import host_for
    from bots.settings import load_settings

    monkeypatch.setenv("HOST", host)
    s = load_settings()
    assert host_for(s) == host
    assert s.hosted is exposed


# --- the port check -------------------------------------------------------------------


def test_ipv6_host_is_accepted_by_the_port_check() -> None:
    """HOST=:: or ::1 (uvicorn supports both) passes the port check."""
    from bots.runtime import check_port_free

    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    check_port_free("::1", port)


def test_port_in_use_on_ipv6_is_reported_as_port() -> None:
    from bots.runtime import check_port_free

    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ConfigError) as exc:
            check_port_free("::1", port)
    assert exc.value.problems[0].startswith(f"PORT: cannot listen on [::1]:{port}")


@pytest.mark.parametrize("host", ["x" * 64 + ".example", "192.0.2.1"])  # no DNS query
def test_bad_host_is_reported_as_host(host: str) -> None:
    from bots.runtime import check_port_free

    with pytest.raises(ConfigError) as exc:
        check_port_free(host, 8000)
    assert exc.value.problems[0].startswith("HOST:"), exc.value.problems


# --- which LLM when LLM_BACKEND is unset ------------------------------------------------


@pytest.mark.parametrize(
    ("env", "backend", "why"),
    [
        (
            {
                "LLM_BASE_URL": "https://openrouter.ai/api/v1",
                "LLM_API_KEY": "sk-x",
                "LLM_MODEL": "m",
            },
            "openai_compatible",
            "LLM_BASE_URL is set",
        ),
        ({"OPENROUTER_API_KEY": "sk-or-x", "LLM_MODEL": "m"}, "openrouter", "OPENROUTER_API_KEY"),
        ({"GROQ_API_KEY": "g", "LLM_BASE_URL": "https://x/v1"}, "groq", "GROQ_API_KEY is set"),
        ({"LLM_API_KEY": "sk-x"}, "openai_compatible", "LLM_API_KEY is set"),
        ({"OLLAMA_MODEL": "qwen3"}, "ollama", "OLLAMA_MODEL is set"),
    ],
)
def test_configured_llm_without_llm_backend_is_not_silently_the_demo(
    env: dict[str, str], backend: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With LLM_BASE_URL + LLM_API_KEY, a preset's key or an Ollama setting and no
    LLM_BACKEND, that backend is used and the summary says which variable chose it."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got, got_why = load(LLMSettings).resolve_backend()
    assert got == backend, got_why
    assert why in got_why


def test_two_keys_without_llm_backend_says_which_one_is_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "a")
    monkeypatch.setenv("LLM_BASE_URL", "https://proxy/v1")
    assert load(LLMSettings).resolve_backend() == (
        "openai",
        "OPENAI_API_KEY is set; LLM_BASE_URL ignored (LLM_BACKEND chooses)",
    )


def test_llm_api_key_without_url_is_refused_not_the_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_core.llm.factory import build_provider

    monkeypatch.setenv("LLM_API_KEY", "sk-x")
    with pytest.raises(ConfigError) as exc:
        build_provider(load(LLMSettings))
    assert any(p.startswith("LLM_BASE_URL:") for p in exc.value.problems)


# --- empty values -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["DAILY_BUDGET_USD", "PORT", "WEB_CHAT_ENABLED", "LLM_VISION", "LOG_LEVEL"]
)
def test_empty_value_means_unset(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`DAILY_BUDGET_USD=` (app.json: "empty: none") or `PORT=` from a .env
    template is the default, not an error."""
    from bots.settings import load_settings

    monkeypatch.setenv(name, "")
    load_settings()


def test_empty_value_is_kept_where_it_means_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ACCESS_EXEMPT_CHANNELS= gates the local channels too; SLACK_WORKING_REACTION=
    puts no reaction.  From the environment and from .env alike."""
    from channels.slack.settings import SlackSettings

    monkeypatch.setenv("ACCESS_EXEMPT_CHANNELS", "")
    monkeypatch.setenv("SLACK_WORKING_REACTION", "")
    assert load(CoreSettings).access_exempt_channels == ""
    assert load(SlackSettings).slack_working_reaction == ""
    monkeypatch.delenv("ACCESS_EXEMPT_CHANNELS")
    env = tmp_path / ".env"
    env.write_text("ACCESS_EXEMPT_CHANNELS=\nPORT=\n")
    s = CoreSettings(_env_file=str(env))  # type: ignore[call-arg]
    assert s.access_exempt_channels == ""
    assert s.port == 8000
    monkeypatch.delenv("SLACK_WORKING_REACTION")
    assert load(SlackSettings).slack_working_reaction == "eyes"


# --- values accepted that would break later ----------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LOG_LEVEL", "verbose"),  # was: a ValueError traceback from logging
        ("LOCK_TTL_SECS", "inf"),  # was: OverflowError at start
        ("SCHEDULER_LEASE_SECS", "inf"),
        ("RECLAIM_IDLE_SECS", "nan"),
        ("RECLAIM_IDLE_SECS", "inf"),  # was: `parley chat` hanging (the worker died)
        ("DEDUP_TTL_SECS", "99999999999999999999"),  # was: every message StoreUnavailable
        ("SESSION_IDLE_TTL_SECS", "99999999999999999999"),
        ("GROUP_REPLY", "always"),  # was: silently `mention`
        ("EVENT_LOOP", "trio"),
    ],
)
def test_core_value_is_refused_at_load(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as exc:
        load(CoreSettings)
    assert exc.value.problems[0].startswith(f"{name}:")
    assert value not in exc.value.problems[0]


def test_enum_settings_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROUP_REPLY", "ALL")
    monkeypatch.setenv("LOG_LEVEL", "debug")
    s = load(CoreSettings)
    assert s.group_reply == "all"
    assert s.log_level == "DEBUG"
    monkeypatch.setenv("LOG_LEVEL", "warn")
    assert load(CoreSettings).log_level == "WARNING"
    monkeypatch.setenv("EVENT_LOOP", " UVLOOP ")
    assert load(CoreSettings).event_loop == "uvloop"


def test_infinite_llm_timeout_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_TIMEOUT_SECS", "inf")
    with pytest.raises(ConfigError) as exc:
        load(LLMSettings)
    assert exc.value.problems[0].startswith("LLM_TIMEOUT_SECS:")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LLM_BASE_URL", "localhost:8000/v1"),  # was: UnsupportedProtocol at every turn
        ("OPENAI_BASE_URL", "api.openai.com/v1"),
        ("OLLAMA_BASE_URL", "localhost:11434"),
        ("ANTHROPIC_BASE_URL", "ftp://api.anthropic.com"),
    ],
)
def test_llm_url_without_scheme_is_refused_at_load(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as exc:
        load(LLMSettings)
    assert exc.value.problems[0] == f"{name}: must start with http:// or https://"


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        # was: the webhook registered at "parley.example/telegram/webhook", refused by
        # Telegram at each release
        ("PUBLIC_URL", "parley.example", "PUBLIC_URL: must start with http:// or https://"),
        # was: every Bot API call failing at run time (UnsupportedProtocol)
        (
            "TELEGRAM_API_BASE_URL",
            "api.telegram.org/bot",
            "TELEGRAM_API_BASE_URL: must start with http:// or https://",
        ),
        (
            "TELEGRAM_API_FILE_URL",
            "api.telegram.org/file/bot",
            "TELEGRAM_API_FILE_URL: must start with http:// or https://",
        ),
        (
            "PUBLIC_URL",
            "https://user:hunter2secret@parley.example",
            "PUBLIC_URL: must not carry credentials (user:password@)",
        ),
        # was: accepted, then Valkey refusing the thread's SET EX at run time
        (
            "SLACK_THREAD_TTL_SECS",
            "99999999999999999999",
            "SLACK_THREAD_TTL_SECS: Input should be less than or equal to 315360000",
        ),
        # the same: the heartbeat's claim is a SET EX of twice the interval
        (
            "HEARTBEAT_INTERVAL_SECS",
            "99999999999999999999",
            "HEARTBEAT_INTERVAL_SECS: Input should be less than or equal to 315360000",
        ),
    ],
)
def test_channel_and_public_urls_and_the_slack_thread_ttl_are_checked_at_load(
    name: str, value: str, line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bots.settings import load_settings

    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert len(exc.value.problems) == 1, exc.value.problems
    assert exc.value.problems[0].startswith(line), exc.value.problems
    assert "hunter2secret" not in exc.value.problems[0]


def test_the_slack_thread_ttl_may_be_ten_years(monkeypatch: pytest.MonkeyPatch) -> None:
    from channels.slack.settings import SlackSettings

    monkeypatch.setenv("SLACK_THREAD_TTL_SECS", str(10 * 365 * 86_400))
    assert load(SlackSettings).slack_thread_ttl_secs == 10 * 365 * 86_400


def test_secret_file_that_is_not_utf8_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key file saved as UTF-16 (PowerShell `echo key > file`) is one line naming
    the variable, without the content."""
    f = tmp_path / "key"
    f.write_bytes("sk-abc\n".encode("utf-16"))
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(f))
    with pytest.raises(ConfigError) as exc:
        load(LLMSettings)
    assert exc.value.problems[0].startswith("OPENAI_API_KEY_FILE:")
    assert "UTF-8" in exc.value.problems[0]


def test_secret_file_with_a_utf8_byte_order_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "key"
    f.write_bytes("sk-abc\r\n".encode("utf-8-sig"))
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(f))
    key = load(LLMSettings).openai_api_key
    assert key is not None and key.get_secret_value() == "sk-abc"


# --- Redis URL errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://user:pw@127.0.0.1:notaport/0",
        "redis://:pw@[::1",
        "redis://:pw@/0",
        "redis://:pw@127.0.0.1:6379/abc",  # redis-py: silently database 0
        "redis://:pw@127.0.0.1:6379/1a",
        "rediss://:pw@127.0.0.1:6379/0/extra",
    ],
)
def test_malformed_redis_url_is_config_error(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from bots.settings import load_settings

    monkeypatch.setenv("REDIS_URL", url)
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert exc.value.problems[0].startswith("REDIS_URL:")
    assert "pw" not in exc.value.problems[0]


@pytest.mark.parametrize(
    "url",
    [
        "redis://user:pw@127.0.0.1:notaport/0",
        "redis://:pw@[::1",
        "redis://:pw@/0",
        "redis://:pw@127.0.0.1:6379/abc",
        "redis://:pw@127.0.0.1:6379/1a",
    ],
)
def test_make_clients_refuses_a_malformed_url(url: str) -> None:
    from agent_core.store.client import make_clients

    with pytest.raises(ConfigError) as exc:
        make_clients(url)
    assert exc.value.problems[0].startswith("REDIS_URL:")
    assert "pw" not in exc.value.problems[0].replace("***", "")


@pytest.mark.parametrize("url", ["redis://h:6379", "redis://h:6379/", "redis://h/15", "unix:///s"])
def test_redis_url_database_paths_that_are_fine(url: str) -> None:
    from agent_core.settings import CoreSettings

    assert CoreSettings(redis_url=url).redis_url is not None  # type: ignore[arg-type]


def test_redis_url_query_argument_redis_py_refuses_is_config_error() -> None:
    from agent_core.store.client import make_clients

    with pytest.raises(ConfigError) as exc:
        make_clients("redis://:pw@127.0.0.1:1/0?socket_timeout=soon")
    assert exc.value.problems[0].startswith("REDIS_URL:")


async def test_redis_url_with_tls_query_on_plain_scheme_is_config_error() -> None:
    """`redis://...?ssl_cert_reqs=none` (the redis-py idiom for rediss://, pasted
    onto a redis:// URL) is one REDIS_URL line at the first PING."""
    from agent_core.store.client import check_reachable, make_clients

    clients = make_clients("redis://:pw@127.0.0.1:1/0?ssl_cert_reqs=none")
    try:
        with pytest.raises(ConfigError) as exc:
            await check_reachable(clients)
    finally:
        await clients.close()
    assert exc.value.problems[0].startswith("REDIS_URL:")
    assert "rediss://" in exc.value.problems[0]


class _RefusingRedis:
    """A client whose connection (check_reachable opens one of its own) fails."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.connection_pool = self

    def make_connection(self) -> _RefusingRedis:
        return self

    is_connected = False

    async def connect(self) -> None:
        raise self.error

    async def disconnect(self, nowait: bool = False) -> None:
        pass


async def test_self_signed_rediss_error_names_redis_tls_insecure() -> None:
    """Heroku Redis without REDIS_TLS_INSECURE=true: the line names the setting
    that fixes it."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from agent_core.store.client import RedisClients, check_reachable

    refused = _RefusingRedis(
        RedisConnectionError(
            "Error 1 connecting to h:6380. [SSL: CERTIFICATE_VERIFY_FAILED] certificate "
            "verify failed: self-signed certificate in certificate chain (_ssl.c:1006)."
        )
    )
    clients = RedisClients("rediss://:pw@h:6380", refused, refused)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as exc:
        await check_reachable(clients)
    assert "REDIS_TLS_INSECURE=true" in exc.value.problems[0], exc.value.problems[0]


# --- Heroku ---------------------------------------------------------------------------------


def test_heroku_python_buildpack_finds_a_package_manager_file() -> None:
    """app.json uses the heroku/python buildpack, which refuses a build without one
    of these at the root ("Couldn't find any supported Python package manager files")."""
    names = ("requirements.txt", "Pipfile.lock", "poetry.lock", "uv.lock")
    assert any((ROOT / n).is_file() for n in names)
    lines = [
        line.strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines == ["."]  # Parley itself, its dependencies from pyproject.toml


def test_container_files_bind_all_interfaces_explicitly() -> None:
    """$PORT alone no longer means "hosted": the container files say HOST=0.0.0.0."""
    assert "HOST=0.0.0.0" in (ROOT / "deploy" / "Dockerfile").read_text()
    assert 'HOST: "0.0.0.0"' in (ROOT / "deploy" / "docker-compose.yml").read_text()


def test_the_container_does_not_run_parley_as_root() -> None:
    """run_shell's protection of Parley's secrets (non-dumpable, docs/tools.md) does
    not hold for root, so the shipped image runs as its own user."""
    lines = (ROOT / "deploy" / "Dockerfile").read_text().splitlines()
    users = [ln.split(None, 1)[1].strip() for ln in lines if ln.upper().startswith("USER ")]
    assert users and users[-1] not in ("root", "0")


def test_secret_extra_header_values_are_redacted_in_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    from bots.settings import load_settings

    monkeypatch.setenv("LLM_EXTRA_HEADERS", "Authorization:Bearer sk-hdr-SECRET1,X-Title:Parley")
    secrets = load_settings().secret_values()
    assert "Bearer sk-hdr-SECRET1" in secrets
    assert "sk-hdr-SECRET1" in secrets
    assert "Parley" not in secrets


def test_listen_on_holds_the_port_until_the_server_takes_it() -> None:
    """The port check returns the listening sockets uvicorn serves on, so nothing can
    take the port between the check and the server's start."""
    from bots.runtime import check_port_free, listen_on

    socks = listen_on("127.0.0.1", 0)
    try:
        port = socks[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # already listening
        with pytest.raises(ConfigError, match=f"PORT: cannot listen on 127.0.0.1:{port}"):
            check_port_free("127.0.0.1", port)
    finally:
        for s in socks:
            s.close()


def test_a_line_of_dotenv_that_cannot_be_parsed_is_reported_once_with_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import bots.settings as bs

    env = tmp_path / ".env"
    env.write_text("LOG_LEVEL=INFO\nthis line is not NAME=value 'unclosed\n")
    monkeypatch.setattr(bs, "ENV_FILE", str(env))
    with caplog.at_level(logging.WARNING):
        bs.load_settings()
    ours = [r.getMessage() for r in caplog.records if "cannot be parsed" in r.getMessage()]
    assert ours == [f"{env} line 2 cannot be parsed; it is ignored (expected NAME=value)"]
    assert not [r for r in caplog.records if r.name == "dotenv.main"]


@pytest.mark.parametrize("dyno", ["", "web.1"])
async def test_unreachable_redis_on_heroku_points_to_the_add_on(
    monkeypatch: pytest.MonkeyPatch, dyno: str
) -> None:
    """Off Heroku the line offers the embedded server; on Heroku ($DYNO set), where an
    unset REDIS_URL is refused, it points to the add-on instead."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from agent_core.store.client import RedisClients, check_reachable

    refused = _RefusingRedis(
        RedisConnectionError("Error 111 connecting to h:6379. Connection refused.")
    )

    if dyno:
        monkeypatch.setenv("DYNO", dyno)
    else:
        monkeypatch.delenv("DYNO", raising=False)
    clients = RedisClients("redis://:pw@h:6379", refused, refused)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as exc:
        await check_reachable(clients)
    line = exc.value.problems[0]
    assert line.startswith("REDIS_URL: cannot reach redis://***@h:6379"), line
    if dyno:
        assert "unset REDIS_URL" not in line and "heroku redis:info" in line, line
    else:
        assert "unset REDIS_URL to use the embedded server" in line, line


def test_the_summary_shows_the_telegram_mode_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not "mode auto": the mode the channel will run in, and what decided it."""
    from bots.settings import load_settings

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abcdef")
    assert load_settings().platform_status()["telegram"] == (
        True,
        "bot 123, polling mode: no PUBLIC_URL",
    )
    monkeypatch.setenv("PUBLIC_URL", "https://parley.example")
    assert load_settings().platform_status()["telegram"][1] == (
        "bot 123, webhook mode: PUBLIC_URL is set"
    )
    monkeypatch.setenv("TELEGRAM_MODE", "polling")
    assert load_settings().platform_status()["telegram"][1] == (
        "bot 123, polling mode: TELEGRAM_MODE"
    )


def test_the_web_chat_line_says_which_platform_and_why_slack_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The summary prints each why in parentheses: none nested inside.  A platform
    that is on is named; a Slack bot token without a signing secret or app token is
    said to be why the web chat is on, not "no platform configured"."""
    from bots.settings import load_settings
    from channels.web import channel as web_channel

    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-123")
    s = load_settings()
    on, why = s.platform_status()["slack"]
    assert not on and "(" not in why and "SLACK_SIGNING_SECRET" in why, why
    assert s.incomplete_platforms() == ["slack"]
    on, why = web_channel.status(s.web, [], incomplete=s.incomplete_platforms())
    assert on and why == "no platform channel is on: slack is set up only in part, see its line"
    on, why = web_channel.status(s.web, ["telegram"])
    assert not on and why == "telegram is configured; set WEB_CHAT_ENABLED=true to keep it"
    on, why = web_channel.status(s.web, ["telegram", "discord"])
    assert why.startswith("telegram and discord are configured;") and "(" not in why
    monkeypatch.delenv("SLACK_BOT_TOKEN")
    s = load_settings()
    assert s.incomplete_platforms() == []
    assert web_channel.status(s.web, [], incomplete=[]) == (True, "no platform configured")


# --- the Heroku button -----------------------------------------------------------------


def test_the_heroku_buttons_generated_secrets_alone_are_no_half_configured_platform(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """app.json generates TELEGRAM_WEBHOOK_SECRET for every app: a deploy without
    Telegram (Slack only, Discord only, the LLM alone) has no platform half
    configured; a bot token without the rest still is one."""
    import json

    from bots.settings import load_settings

    app = json.loads((ROOT / "app.json").read_text())
    generated = [n for n, v in app["env"].items() if v.get("generator") == "secret"]
    assert "TELEGRAM_WEBHOOK_SECRET" in generated
    for name in generated:
        monkeypatch.setenv(name, "a" * 64)
    for name, v in app["env"].items():
        if "value" in v:
            monkeypatch.setenv(name, v["value"])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-abcdefgh12345678")
    assert load_settings().incomplete_platforms() == []
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-123")
    assert load_settings().incomplete_platforms() == ["slack"]
    # the button leaves PUBLIC_URL empty: Telegram polls until it is set
    said = app["env"]["TELEGRAM_BOT_TOKEN"]["description"]
    assert "PUBLIC_URL" in said and "polling" in said, said


# --- secret files ----------------------------------------------------------------------


@pytest.mark.parametrize("secret", ["sk-proj-SECRETabc123456789", "123456:ABCdefGHIjkl"])
def test_a_secret_put_in_its_file_variable_is_not_echoed(
    secret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OPENAI_API_KEY_FILE=sk-… (the key in the _FILE variable by mistake): the line
    says what the variable must hold, and never shows the value."""
    monkeypatch.setenv("OPENAI_API_KEY_FILE", secret)
    with pytest.raises(ConfigError) as exc:
        load(LLMSettings, _env_file=None)
    [line] = exc.value.problems
    assert secret not in line and secret[:8] not in line, line
    assert line.startswith("OPENAI_API_KEY_FILE: cannot read the file it names"), line
    assert "not the secret itself (that goes in OPENAI_API_KEY)" in line, line


@pytest.mark.parametrize("text", ["", "\n", "  \r\n", "\ufeff\n"])
def test_an_empty_secret_file_is_a_clear_error(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unpopulated Docker / Kubernetes secret is no "not set" (the demo model, the
    channel off): it stops Parley naming the variable and the file."""
    empty = tmp_path / "openai_key"
    empty.write_text(text, encoding="utf-8")
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(empty))
    with pytest.raises(ConfigError) as exc:
        load(LLMSettings, _env_file=None)
    assert exc.value.problems == [
        f"OPENAI_API_KEY_FILE: {str(empty)!r} is empty; put the secret in it, "
        "or unset OPENAI_API_KEY_FILE"
    ]
    # named in .env too
    monkeypatch.delenv("OPENAI_API_KEY_FILE")
    env = tmp_path / ".env"
    env.write_text(f"TELEGRAM_BOT_TOKEN_FILE={empty}\n")
    from channels.telegram.settings import TelegramSettings

    with pytest.raises(ConfigError) as exc:
        load(TelegramSettings, _env_file=str(env))
    assert exc.value.problems[0].startswith("TELEGRAM_BOT_TOKEN_FILE: "), exc.value.problems


# --- PARLEY_ENV_FILE -------------------------------------------------------------------

_LOAD = (
    "from agent_core.errors import ConfigError\n"
    "from bots.settings import load_settings\n"
    "try:\n"
    "    print('agent_name=' + load_settings().core.agent_name)\n"
    "except ConfigError as e:\n"
    "    print('problems=' + repr(e.problems)); raise SystemExit(2)\n"
)


def _py(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (PARLEY_ENV_FILE is read at import), with only ``env``."""
    base = {"PATH": os.environ["PATH"], "HOME": str(cwd), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_empty_parley_env_file_means_the_default_dot_env(tmp_path: Path) -> None:
    """README: an empty value means unset, the default applies (.env)."""
    (tmp_path / ".env").write_text("AGENT_NAME=Zed\n")
    r = _py(_LOAD, tmp_path, PARLEY_ENV_FILE="")
    assert "agent_name=Zed" in r.stdout, r.stdout + r.stderr


def test_a_missing_parley_env_file_stops_parley_with_one_line(tmp_path: Path) -> None:
    """Named explicitly, a file that is not there (a typo) is no "no .env": Parley
    would start with none of the operator's settings.  The default .env stays
    optional, and os.devnull (the tests') is an empty file."""
    missing = tmp_path / "prod.env"
    r = _py(_LOAD, tmp_path, PARLEY_ENV_FILE=str(missing))
    assert r.returncode == 2, r.stdout + r.stderr
    problem = f"PARLEY_ENV_FILE: cannot read '{missing}' (No such file or directory); unset it to use .env"
    assert r.stdout.strip() == f"problems={[problem]!r}", r.stdout + r.stderr
    r = _py(_LOAD, tmp_path, PARLEY_ENV_FILE=str(tmp_path))
    assert "is a directory, not a file" in r.stdout, r.stdout + r.stderr
    assert "agent_name=Parley" in _py(_LOAD, tmp_path).stdout  # no .env: fine
    assert "agent_name=Parley" in _py(_LOAD, tmp_path, PARLEY_ENV_FILE=os.devnull).stdout


# --- the web chat's passphrase -----------------------------------------------------------


@pytest.mark.parametrize("token", ["correct horse battery staple", "motdepassé-très-long-123"])
def test_a_web_chat_passphrase_is_accepted(token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """WEB_CHAT_TOKEN is typed into the page and sent in /api/login's JSON body, never
    in a header: spaces and accents are fine; surrounding whitespace is dropped."""
    from channels.web.channel import WebSettings

    monkeypatch.setenv("WEB_CHAT_TOKEN", f"  {token}\n")
    s = load(WebSettings, _env_file=None)
    assert s.web_chat_token is not None and s.web_chat_token.get_secret_value() == token
    monkeypatch.setenv("WEB_CHAT_TOKEN", " \n")
    assert load(WebSettings, _env_file=None).web_chat_token is None


# --- model names -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "model", ["openai/gpt-4o-mini ", "openai/gpt-4o-mini\n", " openai/gpt-4o-mini"]
)
def test_a_presets_model_name_is_stripped(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A paste into the Heroku dashboard brings a trailing space or newline: the
    provider would answer "model not found"."""
    from agent_core.llm.config import backend_config

    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-abcdefgh")
    monkeypatch.setenv("LLM_MODEL", model)
    monkeypatch.setenv("LLM_CHEAP_MODEL", model)
    monkeypatch.setenv("LLM_FALLBACK_MODEL", model)
    s = load(LLMSettings, _env_file=None)
    assert backend_config(s).model == "openai/gpt-4o-mini"
    assert s.llm_cheap_model == s.llm_fallback_model == "openai/gpt-4o-mini"
    monkeypatch.delenv("OPENROUTER_API_KEY")
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert backend_config(load(LLMSettings, _env_file=None)).model == "openai/gpt-4o-mini"


def test_a_blank_llm_model_is_not_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_core.llm.config import backend_config

    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-abcdefgh")
    monkeypatch.setenv("LLM_MODEL", "   ")
    with pytest.raises(ConfigError) as exc:
        backend_config(load(LLMSettings, _env_file=None))
    assert exc.value.problems[0].startswith("LLM_MODEL: required"), exc.value.problems
    # a vendor's own blank model falls back as if unset: LLM_MODEL, else its default
    monkeypatch.delenv("OPENROUTER_API_KEY")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-abcdefgh")
    monkeypatch.setenv("OPENAI_MODEL", " \n")
    assert backend_config(load(LLMSettings, _env_file=None)).model == "gpt-4o"
    monkeypatch.setenv("LLM_MODEL", "gpt-4.1 ")
    assert backend_config(load(LLMSettings, _env_file=None)).model == "gpt-4.1"


# --- ACCESS_EXEMPT_CHANNELS and paths ---------------------------------------------------


def test_access_exempt_channels_are_lower_cased_and_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Web` is the web channel (it was matched case-sensitively, gating it); a
    misspelt name (`consol`) stops Parley naming the known channels."""
    from agent_core.agent.access import AccessControl
    from agent_core.events import CHANNELS

    monkeypatch.setenv("ACCESS_EXEMPT_CHANNELS", " Web , CONSOLE")
    s = load(CoreSettings, _env_file=None)
    assert s.access_exempt_channels == "web,console"
    assert AccessControl(MagicMock(), s).exempt == {"web", "console"}
    monkeypatch.setenv("ACCESS_EXEMPT_CHANNELS", "web,consol")
    with pytest.raises(ConfigError) as exc:
        load(CoreSettings, _env_file=None)
    assert exc.value.problems == [
        f"ACCESS_EXEMPT_CHANNELS: 'consol' is no channel; known: {', '.join(CHANNELS)} "
        "(empty: none is exempt)"
    ]


def test_paths_set_explicitly_that_are_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SHELL_TOOL_WORKDIR with the shell tool on: every run_shell call would fail, so
    Parley stops.  PROFILES_DIR and HEARTBEAT_FILE: it works without them, a warning
    says they are not there.  Defaults left alone are never warned about."""
    from bots.settings import load_settings

    with caplog.at_level(logging.WARNING):
        load_settings()
    assert not [r for r in caplog.records if "PROFILES_DIR" in r.getMessage()]
    monkeypatch.setenv("PROFILES_DIR", str(tmp_path / "profiles"))
    monkeypatch.setenv("HEARTBEAT_FILE", str(tmp_path / "HEARTBEAT.md"))
    monkeypatch.setenv("SHELL_TOOL_WORKDIR", str(tmp_path / "work"))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_settings()  # the shell tool is off: its directory does not matter
    said = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith(f"PROFILES_DIR: '{tmp_path}/profiles' is not a directory") for m in said
    )
    assert any(
        m.startswith(f"HEARTBEAT_FILE: '{tmp_path}/HEARTBEAT.md' is not a file") for m in said
    )
    monkeypatch.setenv("ENABLE_SHELL_TOOL", "true")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert exc.value.problems == [
        f"SHELL_TOOL_WORKDIR: '{tmp_path}/work' is not a directory (it is not created); "
        "create it, or unset SHELL_TOOL_WORKDIR for PARLEY_DATA_DIR/shell"
    ]
    for d in ("profiles", "work"):
        (tmp_path / d).mkdir()
    (tmp_path / "HEARTBEAT.md").write_text("- check\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_settings()
    assert not [r for r in caplog.records if r.getMessage().startswith(("PROFILES", "HEART"))]
