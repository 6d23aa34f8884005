"""The `parley` command as a user runs it: real subprocesses, real embedded Valkey."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_core.store import keys
from agent_core.store.embedded import EmbeddedValkey
from channels.console.chat import ConsoleChat

ROOT = Path(__file__).resolve().parents[2]


def parley(
    args: list[str], env: dict[str, str], stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET"))
    }
    base.pop("REDIS_URL", None)
    base.pop("PORT", None)
    base.update({"PARLEY_ENV_FILE": os.devnull, **env})
    return subprocess.run(
        [sys.executable, "-m", "bots.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=base,
        cwd=ROOT,
        timeout=timeout,
    )


def test_version() -> None:
    r = parley(["--version"], {})
    assert r.returncode == 0
    assert r.stdout.startswith("parley ")


def test_piped_chat_answers_each_line_and_history_survives_a_restart(tmp_path: Path) -> None:
    env = {"PARLEY_DATA_DIR": str(tmp_path / "data")}
    first = parley(["chat"], env, stdin="hello\n/help\n")
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "Demo model" in out  # the demo labels its first answer
    assert "/new" in out  # /help answered
    assert "Traceback" not in first.stderr

    second = parley(["chat"], env, stdin="hello again\n")
    assert second.returncode == 0, second.stderr
    # the conversation was loaded from disk: the demo does not introduce itself again
    assert "Demo model" not in second.stdout
    assert "Hello!" in second.stdout or "You said" in second.stdout

    # and the history is really in the persisted store
    import asyncio

    from agent_core.agent.session import Session
    from agent_core.store.client import make_clients
    from agent_core.store.delivery import Delivery
    from agent_core.store.embedded import EmbeddedValkey
    from channels.console.chat import console_thread

    async def read_history() -> list[str]:
        v = EmbeddedValkey(tmp_path / "data")
        await v.start()
        c = make_clients(v.url)
        try:
            ver, data = await Delivery(c.redis, c.blocking).load_session(console_thread())
            assert data is not None
            return [m.content for m in Session.from_json(data, ver).history if m.role == "user"]
        finally:
            await c.close()
            await v.stop()

    assert asyncio.run(read_history()) == ["hello", "hello again"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"LLM_BACKEND": "gpt5000"}, "LLM_BACKEND: unknown backend 'gpt5000'"),
        ({"REDIS_URL": "http://localhost:6379"}, "REDIS_URL: must start with redis://"),
        ({"REDIS_URL": "redis://127.0.0.1:1/0"}, "REDIS_URL: cannot reach redis://127.0.0.1:1/0"),
        (
            {"REDIS_URL": "redis://:hunter2secret@127.0.0.1:1"},
            "REDIS_URL: cannot reach redis://***@127.0.0.1:1",
        ),
        (
            {"PARLEY_DATA_DIR": "/proc/parley-cannot-write"},
            "PARLEY_DATA_DIR: cannot write to /proc/parley-cannot-write",
        ),
        ({"PORT": "eighty"}, "PORT: Input should be a valid integer"),
        # a file, not "cannot write to /etc/passwd (File exists)"
        ({"PARLEY_DATA_DIR": "/etc/passwd"}, "PARLEY_DATA_DIR: /etc/passwd is a file, not a"),
        (
            {"PARLEY_DATA_DIR": "/etc/passwd/parley"},
            "PARLEY_DATA_DIR: /etc/passwd (in /etc/passwd/parley) is a file, not a directory",
        ),
    ],
)
def test_bad_configuration_is_one_clear_line_and_exit_2(
    env: dict[str, str], expected: str, tmp_path: Path
) -> None:
    # a free port: the port check comes first, and 8000 may be taken on this machine
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {"PARLEY_DATA_DIR": str(tmp_path / "d"), "PORT": port, "HOST": "127.0.0.1", **env}
    r = parley(["run"], env, timeout=30)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert expected in r.stderr, r.stderr
    assert "hunter2secret" not in r.stderr + r.stdout


def test_routines_add_with_a_huge_max_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """--max beyond 64 bits overflowed when the routine was stored: a traceback."""
    r = parley(
        [
            *("routines", "add", "r1", "--event", "down"),
            *("--max", "99999999999999999999", "--notify", "web:abc", "summarise"),
        ],
        {"PARLEY_DATA_DIR": str(tmp_path / "d")},
    )
    assert "Traceback" not in r.stderr, r.stderr[-600:]
    assert r.returncode == 2, (r.returncode, r.stderr[-600:])
    assert "at most 1,000" in r.stderr


def test_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = parley(
            ["run"],
            {"PARLEY_DATA_DIR": str(tmp_path / "d"), "PORT": str(port), "HOST": "127.0.0.1"},
            timeout=30,
        )
    assert r.returncode == 2
    assert f"PORT: cannot listen on 127.0.0.1:{port}" in r.stderr
    assert "Traceback" not in r.stderr


def test_release_on_heroku_without_public_url_says_how_telegram_gets_connected(
    tmp_path: Path, valkey: EmbeddedValkey
) -> None:
    """app.json leaves PUBLIC_URL empty (the domain is known only after the app
    exists): the release log must say Telegram is not connected and how to fix it."""
    r = parley(
        ["release"],
        {
            "PARLEY_DATA_DIR": str(tmp_path / "data"),
            "REDIS_URL": valkey.url,
            "DYNO": "release.1",
            "TELEGRAM_BOT_TOKEN": "123456:ABCDEFabcdef",
            # the release asks Telegram for a webhook to remove: unreachable is a warning
            "TELEGRAM_API_BASE_URL": "http://127.0.0.1:9/bot",
        },
    )
    assert r.returncode == 0, r.stderr[-600:]
    assert "polling mode (no PUBLIC_URL)" in r.stdout
    assert "heroku ps:scale gateway=1" in r.stdout and "PUBLIC_URL" in r.stdout


DISCORD_ENV = {
    "DISCORD_BOT_TOKEN": "MTIz.fake.token-for-the-test-only-xxxxxxxxxxxxxxxxx",
    "DISCORD_API_BASE_URL": "http://127.0.0.1:9/api/v10",
}


def test_release_on_heroku_says_discord_needs_a_gateway_process(
    tmp_path: Path, valkey: EmbeddedValkey
) -> None:
    """What the operator saw: app.json starts no gateway dyno; with DISCORD_BOT_TOKEN
    set the release said nothing (it did for Telegram polling), every process looked
    healthy and the bot never answered on Discord: only a gateway process connects."""
    r = parley(
        ["release"],
        {
            "PARLEY_DATA_DIR": str(tmp_path / "data"),
            "REDIS_URL": valkey.url,
            "DYNO": "release.1",
            **DISCORD_ENV,
        },
    )
    assert r.returncode == 0, r.stderr[-600:]
    assert "discord: needs a gateway process: heroku ps:scale gateway=1" in r.stdout, r.stdout


@pytest.mark.parametrize(
    ("args", "dyno"),
    [
        (["run", "web"], "web.1"),
        (["run", "worker"], "worker.1"),
        (["release"], "release.1"),
        (["doctor"], "run.1"),
        (["pairing", "list"], "run.2"),
    ],
)
def test_on_heroku_without_redis_url_every_command_refuses_to_start(
    args: list[str], dyno: str, tmp_path: Path
) -> None:
    """REDIS_URL unset on Heroku (the add-on missing or detached): an embedded Valkey
    per dyno would let web acknowledge messages into a Redis no worker reads.  Every
    command refuses, naming the add-on, and starts no server."""
    data = tmp_path / "d"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    r = parley(args, {"PARLEY_DATA_DIR": str(data), "DYNO": dyno, "PORT": port}, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stdout[-600:], r.stderr[-600:])
    assert "Traceback" not in r.stderr
    assert "REDIS_URL is not set" in r.stderr, r.stderr[-600:]
    assert "heroku addons:create heroku-redis:" in r.stderr
    assert not (data / "valkey.sock").exists()


def test_ollama_at_its_default_context_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Ollama runs models with 4,096 tokens of context unless started otherwise, which
    silently drops the system prompt and tools: Parley refuses, naming the fix."""
    env = {"PARLEY_DATA_DIR": str(tmp_path / "d"), "LLM_BACKEND": "ollama", "OLLAMA_MODEL": "m"}
    r = parley(["chat"], env)
    assert r.returncode == 2, r.stderr[-600:]
    assert "4,096 tokens" in r.stderr and "OLLAMA_CONTEXT_LENGTH=32768" in r.stderr
    r = parley(["chat"], {**env, "OLLAMA_CONTEXT_LENGTH": "32768"})
    assert r.returncode == 0, r.stderr[-600:]


def _json_lines(text: str) -> list[dict[str, object]]:
    import orjson

    records = []
    for line in text.splitlines():
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            raise AssertionError(f"not a JSON object: {line!r}\nall:\n{text}") from None
    return records


def test_log_format_json_is_one_object_per_line_on_both_streams(
    valkey: EmbeddedValkey, tmp_path: Path
) -> None:
    """README: LOG_FORMAT=json is one object per line.  Before, the settings' own
    warnings (logged before logging was set up), `parley release`'s and `doctor`'s
    results, a refused setting, the start-up summary and "stopping" / "stopped"
    were plain text among the JSON."""
    import signal
    import time

    env = {"LOG_FORMAT": "json", "LLM_BACKEND": "demo", "PARLEY_TYPO": "1"}
    env["REDIS_URL"] = valkey.url
    for args in (["release"], ["doctor"]):
        r = parley(args, env, timeout=60)
        assert r.returncode == 0, (r.stdout, r.stderr)
        records = _json_lines(r.stdout) + _json_lines(r.stderr)
        assert any("PARLEY_TYPO" in str(x["msg"]) for x in records), records
        assert any(str(x["msg"]).startswith(f"{args[0]}: ") for x in records), records
    bad = parley(["release"], {**env, "REDIS_URL": "redis://h:1/abc"}, timeout=60)
    assert bad.returncode == 2
    [refused] = [x for x in _json_lines(bad.stderr) if x["level"] == "error"]
    assert str(refused["msg"]).startswith("REDIS_URL:"), refused
    assert _json_lines(bad.stdout) == []

    # `parley run worker`: the summary, "stopping", "stopped"
    out, errs = tmp_path / "out", tmp_path / "err"
    with out.open("w") as o, errs.open("w") as e:
        base = {
            k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET"))
        }
        base.update({"PARLEY_ENV_FILE": os.devnull, **env})
        proc = subprocess.Popen(
            [sys.executable, "-m", "bots.cli", "run", "worker"],
            stdout=o,
            stderr=e,
            env=base,
            cwd=ROOT,
        )
        try:
            for _ in range(300):  # 30 s at most: until the worker consumes
                if "consuming" in errs.read_text():
                    break
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, errs.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    records = _json_lines(out.read_text()) + _json_lines(errs.read_text())
    said = [str(x["msg"]) for x in records]
    assert any(m.startswith("Parley ") and "process role: worker" in m for m in said), said
    assert any(m.startswith("stopping:") for m in said) and "stopped" in said, said


def test_log_level_warning_does_not_hide_the_operator_lines_with_json(
    valkey: EmbeddedValkey, tmp_path: Path
) -> None:
    """Text mode prints `parley release`'s and `doctor`'s results whatever LOG_LEVEL
    says; with LOG_FORMAT=json they were INFO records, dropped at WARNING."""
    env = {"LOG_FORMAT": "json", "LOG_LEVEL": "WARNING", "LLM_BACKEND": "demo"}
    env["REDIS_URL"] = valkey.url
    env["PARLEY_DATA_DIR"] = str(tmp_path)
    for args in (["release"], ["doctor"]):
        r = parley(args, env, timeout=60)
        assert r.returncode == 0, (r.stdout, r.stderr)
        said = [str(x["msg"]) for x in _json_lines(r.stdout) + _json_lines(r.stderr)]
        assert any(m.startswith(f"{args[0]}: ") for m in said), said


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_bad_env_file_line_is_reported_once_in_the_chosen_format(
    valkey: EmbeddedValkey, tmp_path: Path, fmt: str
) -> None:
    """python-dotenv's own warning about the line, logged while reading LOG_FORMAT
    before logging was set up, was a plain-text line beside Parley's report."""
    env_file = tmp_path / ".env"
    env_file.write_text(f"LOG_FORMAT={fmt}\nthis is not valid\n")
    env = {"PARLEY_ENV_FILE": str(env_file), "LLM_BACKEND": "demo", "REDIS_URL": valkey.url}
    env["PARLEY_DATA_DIR"] = str(tmp_path)
    r = parley(["release"], env, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    if fmt == "json":
        said = [str(x["msg"]) for x in _json_lines(r.stdout) + _json_lines(r.stderr)]
    else:
        said = (r.stdout + r.stderr).splitlines()
    assert not [m for m in said if "python-dotenv" in m], said
    assert len([m for m in said if "line 2 cannot be parsed" in m]) == 1, said


def test_doctor_shows_where_redis_is_and_hides_only_its_password(
    valkey: EmbeddedValkey, tmp_path: Path
) -> None:
    """The redis row read `***: version …` for a URL without a password: the whole
    REDIS_URL was a secret, host and path included.  Now only a password is hidden,
    in the table and in JSON."""
    import redis as redis_py

    admin = redis_py.Redis.from_url(valkey.url)
    admin.execute_command(
        "ACL", "SETUSER", "doctor-shown", "on", ">pw-hunter2-doctor", "~*", "&*", "+@all"
    )
    try:
        with_pw = valkey.url.replace("unix://", "unix://doctor-shown:pw-hunter2-doctor@", 1)
        for url, shown in (
            (valkey.url, valkey.url),
            (with_pw, valkey.url.replace("unix://", "unix://doctor-shown:***@", 1)),
        ):
            env = {"REDIS_URL": url, "LLM_BACKEND": "demo", "PARLEY_DATA_DIR": str(tmp_path)}
            r = parley(["doctor"], {**env, "COLUMNS": "400"}, timeout=60)
            assert r.returncode == 0, (r.stdout, r.stderr)
            cells = [ln.split("│") for ln in r.stdout.splitlines() if ln.startswith("│")]
            [row] = ["│".join(c) for c in cells if c[1].strip() == "redis"]
            assert f"{shown}: version" in row, row
            j = parley(["doctor"], {**env, "LOG_FORMAT": "json"}, timeout=60)
            assert j.returncode == 0, (j.stdout, j.stderr)
            said = [str(x["msg"]) for x in _json_lines(j.stdout) + _json_lines(j.stderr)]
            assert f"doctor: redis: OK: {shown}: version" in "\n".join(said), said
            assert "pw-hunter2-doctor" not in r.stdout + r.stderr + j.stdout + j.stderr
    finally:
        admin.execute_command("ACL", "DELUSER", "doctor-shown")
        admin.close()


def _worker_summary(env: dict[str, str]) -> str:
    """What `parley run worker` says at start (it is stopped once it consumes)."""
    import signal

    base = {
        k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET"))
    }
    for k in ("REDIS_URL", "PORT", "DYNO", "LLM_BACKEND"):
        base.pop(k, None)
    base.update({"PARLEY_ENV_FILE": os.devnull, "COLUMNS": "200", **env})
    proc = subprocess.Popen(
        [sys.executable, "-m", "bots.cli", "run", "worker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=base,
        cwd=ROOT,
        text=True,
    )
    said: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # until the worker consumes (or exits)
            said.append(line)
            if "consuming" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
        said.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return "".join(said)


def test_a_worker_does_not_say_it_serves_the_web_chat(
    valkey: EmbeddedValkey, tmp_path: Path
) -> None:
    """A worker serves no HTTP: its summary said `web: on (no platform configured)`."""
    out = _worker_summary({"REDIS_URL": valkey.url, "PARLEY_DATA_DIR": str(tmp_path)})
    assert "process role: worker" in out, out
    assert "web:      replies only (no HTTP in this role)" in out, out
    assert "web:      on" not in out and "http:" not in out, out


def test_a_worker_says_discords_gateway_runs_in_another_process(
    valkey: EmbeddedValkey, tmp_path: Path
) -> None:
    """What the operator saw: a worker's summary said `discord: on (gateway ...)`
    though a worker never connects to Discord, and no gateway process ran."""
    out = _worker_summary(
        {"REDIS_URL": valkey.url, "PARLEY_DATA_DIR": str(tmp_path), **DISCORD_ENV}
    )
    assert "process role: worker" in out, out
    assert "its connection runs in a gateway process, not here" in out, out


def test_the_demo_model_on_a_deployment_is_a_warning_at_start(
    valkey: EmbeddedValkey, tmp_path: Path
) -> None:
    """No LLM key on a Heroku dyno (a one-click deploy with TELEGRAM_BOT_TOKEN only):
    the worker answered real people with canned demo replies, its summary silent."""
    env = {"REDIS_URL": valkey.url, "PARLEY_DATA_DIR": str(tmp_path), "DYNO": "worker.1"}
    out = _worker_summary(env)
    assert "warning: the offline demo model answers, though this is a Heroku dyno" in out, out
    local = _worker_summary({"REDIS_URL": valkey.url, "PARLEY_DATA_DIR": str(tmp_path)})
    assert "demo" in local and "offline demo model answers" not in local, local


async def test_pairing_list_and_approve_a_group_chat(
    tmp_path: Path, valkey: EmbeddedValkey, redis: Any
) -> None:
    """GROUP_POLICY=pairing: a stranger in a group chat nobody approved gets the
    chat's code; `parley pairing list` names the chat, `approve CODE` lets it in."""
    import asyncio
    import dataclasses

    from agent_core.agent.access import AccessControl
    from agent_core.events import EventKind, InboundEvent, ThreadKey
    from agent_core.settings import CoreSettings

    ev = InboundEvent(
        event_id="e1",
        kind=EventKind.MESSAGE,
        channel="telegram",
        thread=ThreadKey("telegram", "bot", "-777", "5"),
        user_id="42",
        user_name="Mallory",
        text="hi",
        is_direct=False,
        mentions_bot=True,
    )
    access = AccessControl(redis, CoreSettings())
    verdict = await access.check(ev)
    assert not verdict.allowed and "parley pairing approve " in verdict.notice
    code = verdict.notice.split("parley pairing approve ")[1][:8]
    env = {"PARLEY_DATA_DIR": str(tmp_path / "d"), "REDIS_URL": valkey.url}
    listed = await asyncio.to_thread(parley, ["pairing", "list"], env)
    assert listed.returncode == 0, listed.stderr[-600:]
    assert f"{code}  group chat telegram:bot:-777  (asked by telegram:42 (Mallory))" in (
        listed.stdout
    ), listed.stdout
    approved = await asyncio.to_thread(parley, ["pairing", "approve", code.lower()], env)
    assert approved.returncode == 0, approved.stderr[-600:]
    assert "approved group chat telegram:bot:-777" in approved.stdout
    # everyone in the chat, in any of its threads; not the person elsewhere
    assert await access.admits(ev)
    other_thread = ThreadKey("telegram", "bot", "-777")
    assert await access.admits(dataclasses.replace(ev, user_id="43", thread=other_thread))
    other_chat = ThreadKey("telegram", "bot", "-888")
    assert not await access.admits(dataclasses.replace(ev, thread=other_chat))


# ----------------------------------------------- the console, in process
async def test_console_answered_by_another_worker(runtime: Any) -> None:
    async with runtime("worker") as _w, runtime("web", serve_web=True) as front:
        chat = ConsoleChat(front.clients.redis, front.clients.blocking, front.ingest)
        answers = await asyncio.wait_for(chat.send("/help"), 30)
        assert answers and "(no answer" not in answers[-1], answers


async def test_console_message_joined_into_running_turn_gets_its_done(
    runtime: Any, monkeypatch: Any
) -> None:
    """Two terminals of one user on one machine share the thread user@host.  A line
    typed in the second while the first's turn runs is injected into that turn
    (architecture.md: plain messages are read into the running loop).  The turn's
    'done' named only its first message, so the second terminal waited TURN_TIMEOUT
    (10 minutes) and then said '(no answer within the time limit)'; the marker now
    lists every message the turn took in."""
    from agent_core.llm.base import Completion
    from channels.console import chat as console_mod
    from tests.integration.agent.conftest import FnModel, call

    monkeypatch.setattr(console_mod, "TURN_TIMEOUT", 8.0)  # instead of 600 s
    gate = asyncio.Event()
    entered = asyncio.Event()

    class Gated(FnModel):
        async def complete(self, request: Any) -> Completion:
            self.requests.append(request)
            last = request.messages[-1]
            if last.content == "long question" and not gate.is_set():
                entered.set()
                await gate.wait()
                return Completion("", tool_calls=(call("no_such_tool", x=1),))
            return Completion("answer to: " + str(last.content)[:40])

    async with (
        runtime("worker", llm=Gated(lambda r: Completion(""))) as _w,
        runtime("web", serve_web=True) as front,
    ):
        one = ConsoleChat(front.clients.redis, front.clients.blocking, front.ingest)
        two = ConsoleChat(front.clients.redis, front.clients.blocking, front.ingest)
        assert one.thread == two.thread  # same user@host
        first = asyncio.create_task(one.send("long question"))
        await asyncio.wait_for(entered.wait(), 10)
        second = asyncio.create_task(two.send("second line"))
        mailbox = keys.mailbox(one.thread)
        for _ in range(200):  # the second line is queued behind the running turn's
            if await front.clients.redis.llen(mailbox) >= 2:
                break
            await asyncio.sleep(0.05)
        gate.set()
        await asyncio.wait_for(first, 20)
        answers = await asyncio.wait_for(second, 20)
        assert "(no answer within the time limit)" not in answers, answers
