"""Configuration and start-up, through the `parley` command as a user runs it:
one line and exit 2 for a bad value, no secret in the output, a clean stop.

Real subprocesses and a real embedded Valkey, like tests/integration/test_cli.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env(extra: dict[str, str]) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET")) and k not in ("REDIS_URL", "PORT")
    }
    base.update({"PARLEY_ENV_FILE": os.devnull, **extra})
    return base


def parley(
    args: list[str], env: dict[str, str], timeout: float = 60, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bots.cli", *args],
        capture_output=True,
        text=True,
        env=_env(env),
        cwd=cwd,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers_ping(sock: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(1.0)
            s.connect(str(sock))
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _shutdown(sock: Path) -> None:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2.0)
            s.connect(str(sock))
            s.sendall(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n")
            s.recv(64)
    except OSError:
        pass


def _wait(pred, secs: float) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    return False


def _spawn(args: list[str], env: dict[str, str], **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bots.cli", *args],
        env=_env(env),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        **kw,  # type: ignore[arg-type]
    )


# --- tracebacks instead of one line --------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "var"),
    [
        ({"LOG_LEVEL": "verbose"}, "LOG_LEVEL"),
        ({"REDIS_URL": "redis://u:hunter2secret@127.0.0.1:notaport/0"}, "REDIS_URL"),
        ({"REDIS_URL": "redis://:hunter2secret@[::1"}, "REDIS_URL"),
        ({"REDIS_URL": "redis://:hunter2secret@127.0.0.1:1/0?ssl_cert_reqs=none"}, "REDIS_URL"),
        ({"LOCK_TTL_SECS": "inf"}, "LOCK_TTL_SECS"),
        ({"GROUP_REPLY": "always"}, "GROUP_REPLY"),
        ({"LLM_BASE_URL": "localhost:8000/v1"}, "LLM_BASE_URL"),
        ({"LLM_EXTRA_HEADERS": "Authorization Bearer hunter2secret"}, "LLM_EXTRA_HEADERS"),
        ({"HOST": "192.0.2.1"}, "HOST"),
        # a character an HTTP header cannot carry (httpx raised at the first request)
        ({"OPENAI_API_KEY": "sk-hunter2secret \u00e9"}, "OPENAI_API_KEY"),
        ({"OPENAI_API_KEY": "sk-hunter2secret\x01zz"}, "OPENAI_API_KEY"),
        ({"ANTHROPIC_API_KEY": "sk-ant-hunter2secret\u201d"}, "ANTHROPIC_API_KEY"),
        ({"SLACK_BOT_TOKEN": "xoxb-hunter2secret\u00a0x"}, "SLACK_BOT_TOKEN"),
        ({"DISCORD_BOT_TOKEN": "hunter2secret\u00e9"}, "DISCORD_BOT_TOKEN"),
        ({"LLM_EXTRA_HEADERS": "Authorization:Bearer hunter2secret\u00e9"}, "LLM_EXTRA_HEADERS"),
    ],
)
def test_bad_value_is_one_line_not_a_traceback(
    env: dict[str, str], var: str, tmp_path: Path
) -> None:
    r = parley(
        ["run"],
        {
            "PARLEY_DATA_DIR": str(tmp_path / "d"),
            "HOST": "127.0.0.1",
            "PORT": str(_free_port()),
            **env,
        },
        timeout=40,
    )
    assert "Traceback" not in r.stderr, r.stderr[-600:]
    assert r.returncode == 2, (r.returncode, r.stderr[-600:])
    assert f"{var}:" in r.stderr
    assert "hunter2secret" not in r.stdout + r.stderr


def test_doctor_with_a_control_character_in_the_key_is_one_line(tmp_path: Path) -> None:
    r = parley(
        ["doctor"],
        {"PARLEY_DATA_DIR": str(tmp_path / "d"), "OPENAI_API_KEY": "sk-hunter2secret\x01zz"},
        timeout=40,
    )
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out[-600:]
    assert r.returncode == 2, out[-600:]
    assert "OPENAI_API_KEY: contains a character that cannot be sent in an HTTP header " in out
    assert "(position 17)" in out
    assert "hunter2secret" not in out


def test_non_utf8_secret_file_is_one_line(tmp_path: Path) -> None:
    key = tmp_path / "openai.key"
    key.write_bytes("sk-abc\r\n".encode("utf-16"))  # PowerShell's `echo sk-abc > openai.key`
    r = parley(
        ["doctor"],
        {"PARLEY_DATA_DIR": str(tmp_path / "d"), "OPENAI_API_KEY_FILE": str(key)},
        timeout=40,
    )
    assert "Traceback" not in r.stderr, r.stderr[-600:]
    assert r.returncode == 2
    assert "OPENAI_API_KEY_FILE:" in r.stderr


def test_non_utf8_dotenv_file_is_one_line(tmp_path: Path) -> None:
    """A .env saved as Windows-1252 (a curly apostrophe in SYSTEM_PROMPT): every
    command stops with one line naming the file, not a UnicodeDecodeError."""
    env = tmp_path / ".env"
    env.write_bytes(b"SYSTEM_PROMPT=Be nice\x92s\n")
    r = parley(
        ["release"],
        {"PARLEY_ENV_FILE": str(env), "PARLEY_DATA_DIR": str(tmp_path / "d")},
        timeout=40,
    )
    assert "Traceback" not in r.stderr, r.stderr[-600:]
    assert r.returncode == 2, (r.returncode, r.stderr[-600:])
    line = f"{env}: is not UTF-8 text (byte 22); save it as UTF-8"
    assert r.stderr.count(line) == 1, r.stderr[-600:]


# --- SIGTERM during start-up ---------------------------------------------------------


def test_sigterm_during_start_up_leaves_no_valkey_behind(tmp_path: Path) -> None:
    """SIGTERM while start-up is still going on (here: while the Telegram getMe
    check retries) stops the embedded valkey-server this process started."""
    data = tmp_path / "d"
    p = _spawn(
        ["run"],
        {
            "PARLEY_DATA_DIR": str(data),
            "HOST": "127.0.0.1",
            "PORT": str(_free_port()),
            "TELEGRAM_BOT_TOKEN": "123:abcdef",
            "TELEGRAM_API_BASE_URL": "http://127.0.0.1:9/bot",  # refused: getMe retries ~3 s
        },
    )
    sock = data / "valkey.sock"
    try:
        assert _wait(lambda: _answers_ping(sock), 20)
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
        time.sleep(1.0)
        orphan = _answers_ping(sock)
    finally:
        if p.poll() is None:
            p.kill()
        _shutdown(sock)  # an orphan: leave the machine as found
    assert not orphan, "valkey-server still running after parley exited"
    assert p.returncode == 143


# --- noise -----------------------------------------------------------------------------------


def test_doctor_with_unreachable_telegram_prints_no_asyncio_errors(tmp_path: Path) -> None:
    """When the Telegram check fails, `parley doctor` closes the Bot's HTTP session
    (no "Unclosed client session" around the table)."""
    r = parley(
        ["doctor"],
        {
            "PARLEY_DATA_DIR": str(tmp_path / "d"),
            "TELEGRAM_BOT_TOKEN": "123:abcdef",
            "TELEGRAM_API_BASE_URL": "http://127.0.0.1:9/bot",
        },
        timeout=60,
    )
    assert r.returncode == 1
    assert "Unclosed client session" not in r.stdout + r.stderr
    # the telegram row itself fails (the channel starts anyway, doctor must not say OK)
    assert "token accepted" not in r.stdout
    assert "could not reach the Telegram Bot API" in r.stdout + r.stderr


def test_doctor_fails_slack_and_discord_it_could_not_reach(tmp_path: Path) -> None:
    """Slack's auth.test and Discord's application lookup never answered: their rows
    fail with "could not reach", not "token accepted", and no scopes row says every
    scope is granted (nothing was learned)."""
    r = parley(
        ["doctor"],
        {
            "PARLEY_DATA_DIR": str(tmp_path / "d"),
            "LOG_FORMAT": "json",
            "SLACK_BOT_TOKEN": "xoxb-not-a-real-token",
            "SLACK_SIGNING_SECRET": "abcdef123456",
            "SLACK_API_BASE_URL": "http://127.0.0.1:9/api/",
            "DISCORD_BOT_TOKEN": "not.a.token",
            "DISCORD_API_BASE_URL": "http://127.0.0.1:9/api/v10",
        },
        timeout=60,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-800:]
    rows = [
        str(json.loads(line)["msg"])
        for line in out.splitlines()
        if line.startswith("{") and '"doctor: ' in line
    ]
    for name in ("slack", "discord"):
        [row] = [m for m in rows if m.startswith(f"doctor: {name}: ")]
        assert row.startswith(f"doctor: {name}: problem: "), row
        assert "could not reach" in row and f"{name.upper()}_API_BASE_URL" in row, row
    assert not any(m.startswith("doctor: slack scopes:") for m in rows), rows
    assert "token accepted" not in out and "not-a-real-token" not in out


def test_doctor_refuses_credentials_in_the_llm_url_without_echoing_them(tmp_path: Path) -> None:
    """An LLM URL with user:key@ is refused in one line that never shows the key."""
    env = {
        "PARLEY_DATA_DIR": str(tmp_path / "d"),
        "LLM_BASE_URL": "http://proxy:hunter2secret@127.0.0.9:9/v1",
        "LLM_MODEL": "m",
    }
    r = parley(["doctor"], env, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-800:]
    assert "Traceback" not in out, out[-800:]
    assert "LLM_BASE_URL" in out and "credentials" in out, out[-800:]
    assert "hunter2secret" not in out


def test_two_runs_on_one_port_the_second_fails_in_one_line_and_the_first_keeps_redis(
    tmp_path: Path,
) -> None:
    """The port is held from the check on (listen_on), so a second `parley run` on
    the same port fails before it starts anything (exit 2, one PORT: line) and the
    first keeps serving on its embedded Valkey."""
    port = _free_port()
    env = {"PARLEY_DATA_DIR": str(tmp_path / "d"), "HOST": "127.0.0.1", "PORT": str(port)}
    first = _spawn(["run"], env)
    try:

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        assert _wait(ready, 30)
        second = parley(["run"], env, timeout=60)
        assert second.returncode == 2, second.stderr[-800:]
        assert f"PORT: cannot listen on 127.0.0.1:{port}" in second.stderr
        assert "Traceback" not in second.stderr
        assert ready()  # the first one still has its Redis
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)


# --- PARLEY_ENV_FILE --------------------------------------------------------------


def test_a_parley_env_file_that_is_not_there_stops_the_command_with_one_line(
    tmp_path: Path,
) -> None:
    """A typo in PARLEY_ENV_FILE would start Parley with none of the operator's
    settings (the demo model, no platform): it stops with one line instead."""
    missing = tmp_path / "prod.env"
    r = parley(
        ["release"],
        {"PARLEY_ENV_FILE": str(missing), "PARLEY_DATA_DIR": str(tmp_path / "d")},
        timeout=40,
    )
    assert "Traceback" not in r.stderr, r.stderr[-600:]
    assert r.returncode == 2, (r.returncode, r.stderr[-600:])
    line = f"PARLEY_ENV_FILE: cannot read '{missing}' (No such file or directory); unset it to use .env"
    assert r.stderr.count(line) == 1, r.stderr[-600:]
