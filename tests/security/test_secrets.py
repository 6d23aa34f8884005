"""No configured secret ever shows up in a log line, an error message, a chat message
or /metrics.

Recognisable fake secrets are configured for every channel, the LLM and the web
chat; real processes run with LOG_LEVEL=DEBUG through representative flows:
start-up summary, full turns on Telegram, Slack and the web chat, webhooks with
wrong secrets, an LLM 401, /metrics, SIGTERM; ``parley doctor``; each channel's
bad-token start-up; an unreachable password-protected REDIS_URL.  Everything
captured (stdout, stderr, HTTP answers, what the fake platforms received) is
searched for every secret.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_core.store.embedded import EmbeddedValkey
from tests.fakes.discord import FakeDiscord
from tests.fakes.llm_servers import FakeLLMServer, openai_error
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.faults.harness import ROOT, base_env, free_port

TG_TOKEN = "987654:SECRETtgTOKEN-aaaabbbbccccdddd"
TG_WEBHOOK = "SECRET-tg-webhook-zz9"
SLACK_BOT = "xoxb-SECRET-slack-bot-4242"
SLACK_SIGNING = "SECRET-slack-signing-7777"
DISCORD = "MTk5OTk5.SECRET.discord-token-5555"
LLM_KEY = "sk-SECRET-llm-key-0123456789abcdef"
WEB_TOKEN = "SECRET-webchat-token-31337"
WEB_COOKIE = "SECRET-cookie-signing-key-8080"
REDIS_PW = "SECRET-redis-password-6379"
METRICS = "SECRET-metrics-token-9090"

SECRETS = {
    "TELEGRAM_BOT_TOKEN": TG_TOKEN,
    "telegram token (secret part)": TG_TOKEN.split(":", 1)[1],
    "TELEGRAM_WEBHOOK_SECRET": TG_WEBHOOK,
    "SLACK_BOT_TOKEN": SLACK_BOT,
    "SLACK_SIGNING_SECRET": SLACK_SIGNING,
    "DISCORD_BOT_TOKEN": DISCORD,
    "LLM_API_KEY": LLM_KEY,
    "WEB_CHAT_TOKEN": WEB_TOKEN,
    "WEB_CHAT_SECRET": WEB_COOKIE,
    "REDIS_URL password": REDIS_PW,
    "METRICS_TOKEN": METRICS,
}


def leaks(where: str, text: str) -> list[str]:
    return [f"{name} in {where}" for name, value in SECRETS.items() if value in text]


async def _cli(env: dict[str, str], *args: str, timeout: float = 60) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        *args,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace")


def _env(valkey: EmbeddedValkey, llm: FakeLLMServer, port: int, **extra: str) -> dict[str, str]:
    env = base_env(valkey.url, llm.openai_url, port, LOG_LEVEL="DEBUG", LLM_API_KEY=LLM_KEY)
    env.update(
        WEB_CHAT_TOKEN=WEB_TOKEN,
        WEB_CHAT_SECRET=WEB_COOKIE,
        METRICS_TOKEN=METRICS,
        PUBLIC_URL=f"http://127.0.0.1:{port}",
    )
    env.update(extra)
    return env


async def test_no_secret_in_logs_messages_errors_or_metrics(
    valkey: EmbeddedValkey, redis: Any, tmp_path: Path
) -> None:
    tg = await FakeTelegram(token=TG_TOKEN).start()
    slack = FakeSlack(bot_token=SLACK_BOT, signing_secret=SLACK_SIGNING)
    await slack.start()
    llm = await FakeLLMServer().start()
    port = free_port()
    env = _env(
        valkey,
        llm,
        port,
        TELEGRAM_BOT_TOKEN=TG_TOKEN,
        TELEGRAM_API_BASE_URL=tg.base_url,
        TELEGRAM_WEBHOOK_SECRET=TG_WEBHOOK,
        TELEGRAM_MODE="webhook",
        SLACK_BOT_TOKEN=SLACK_BOT,
        SLACK_SIGNING_SECRET=SLACK_SIGNING,
        SLACK_API_BASE_URL=slack.api_url,
        WEB_CHAT_ENABLED="true",
    )
    log = tmp_path / "all.log"
    fh = log.open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bots.cli", "run", "all", env=env, cwd=ROOT, stdout=fh, stderr=fh
    )
    fh.close()
    answers: list[str] = []
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            for _ in range(300):
                try:
                    if (await c.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(log.read_text())
            # full turns
            upd = tg.message_update(777, "hello telegram", user_id=777)
            r = await c.post(
                "/telegram/webhook",
                json=upd,
                headers={"X-Telegram-Bot-Api-Secret-Token": TG_WEBHOOK},
            )
            answers.append(r.text)
            r = await slack.deliver(c, slack.message("D1", "hello slack"))
            answers.append(r.text)
            await c.get("/")
            answers.append((await c.post("/api/login", json={"token": "wrong"})).text)
            answers.append((await c.post("/api/login", json={"token": WEB_TOKEN})).text)
            answers.append((await c.post("/api/messages", json={"text": "hello web"})).text)
            # wrong secrets
            for secret in ("wrong", "", TG_WEBHOOK[:-1]):
                r = await c.post(
                    "/telegram/webhook",
                    json=upd,
                    headers={"X-Telegram-Bot-Api-Secret-Token": secret},
                )
                answers.append(f"{r.status_code} {r.text}")
            r = await slack.deliver(c, slack.message("D1", "forged"), secret="not-it")
            answers.append(f"{r.status_code} {r.text}")
            # the LLM refuses the key
            for _ in range(300):
                if len(llm.requests) >= 3:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"{len(llm.requests)} LLM requests; the three turns make 3")
            llm.push(
                openai_error(401, "invalid_api_key", f"Incorrect API key provided: {LLM_KEY[:8]}…")
            )
            upd2 = tg.message_update(778, "trigger a 401", user_id=778)
            await c.post(
                "/telegram/webhook",
                json=upd2,
                headers={"X-Telegram-Bot-Api-Secret-Token": TG_WEBHOOK},
            )
            for _ in range(300):
                if tg.sent_texts(778):
                    break
                await asyncio.sleep(0.1)
            # the web chat's answer is in its history (waited for, not slept on)
            for _ in range(300):
                history = (await c.get("/api/history")).text
                if "echo: hello web" in history:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"the web chat turn never answered: {history[-500:]}")
            answers.append(history)
            # /metrics: refused without the token (and with it misplaced), read with it
            for auth in ("", "Bearer wrong", f"Bearer {METRICS[:-1]}", METRICS):
                r = await c.get("/metrics", headers={"authorization": auth} if auth else {})
                answers.append(f"{r.status_code} {r.headers} {r.text}")
                assert r.status_code == 401, (auth[:6], r.status_code)
            r = await c.get("/metrics", auth=(METRICS, "wrong"))
            answers.append(f"{r.status_code} {r.headers} {r.text}")
            assert r.status_code == 401
            r = await c.get("/metrics", headers={"authorization": f"Bearer {METRICS}"})
            assert r.status_code == 200 and "parley_" in r.text
            answers.append(r.text)
            r = await c.get("/metrics", auth=("prometheus", METRICS))
            assert r.status_code == 200 and "parley_" in r.text
            answers.append((await c.get("/readyz")).text)
            answers.append((await c.get("/healthz")).text)
        assert tg.sent_texts(777), "the Telegram turn never answered"
        assert tg.sent_texts(778), "the LLM 401 produced no message"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 25)
        except TimeoutError:
            proc.kill()
        await llm.stop()
        await slack.stop()
        await tg.stop()
    found: list[str] = []
    output = log.read_text(errors="replace")
    assert "DEBUG" in output, "the run did not log at DEBUG"
    found += leaks("process output", output)
    found += leaks("HTTP answers", "\n".join(answers))
    found += leaks("Telegram messages", "\n".join(m.text for m in tg.messages.values()))
    found += leaks(
        "Slack messages", "\n".join(str(getattr(m, "text", m)) for m in slack.messages.values())
    )
    assert found == [], found


@pytest.mark.parametrize("channel", ["telegram", "slack", "discord"])
async def test_bad_token_startup_never_prints_the_token(
    channel: str, valkey: EmbeddedValkey, redis: Any
) -> None:
    """Each channel's rejected-token path: a clear error, never the token."""
    llm = await FakeLLMServer().start()
    port = free_port()
    fakes: list[Any] = []
    try:
        if channel == "telegram":
            tg = await FakeTelegram(token="111:OTHER-token").start()
            fakes.append(tg)
            extra = {
                "TELEGRAM_BOT_TOKEN": TG_TOKEN,
                "TELEGRAM_API_BASE_URL": tg.base_url,
                "TELEGRAM_WEBHOOK_SECRET": TG_WEBHOOK,
                "TELEGRAM_MODE": "webhook",
            }
        elif channel == "slack":
            slack = FakeSlack(bot_token="xoxb-other", signing_secret=SLACK_SIGNING)
            await slack.start()
            fakes.append(slack)
            extra = {
                "SLACK_BOT_TOKEN": SLACK_BOT,
                "SLACK_SIGNING_SECRET": SLACK_SIGNING,
                "SLACK_API_BASE_URL": slack.api_url,
            }
        else:
            dc = await FakeDiscord(token="MTAw.other.token").start()
            fakes.append(dc)
            extra = {
                "DISCORD_BOT_TOKEN": DISCORD,
                "DISCORD_API_BASE_URL": dc.api_base,
                "DISCORD_GATEWAY_URL": dc.gateway_url,
            }
        env = _env(valkey, llm, port, **extra)
        code, out = await _cli(env, "run", "all", timeout=40)
        _code_d, out_d = await _cli(env, "doctor", timeout=40)
    finally:
        for f in fakes:
            await f.stop()
        await llm.stop()
    assert code != 0 or "rejected" in out.lower() or "invalid" in out.lower(), out
    found = leaks(f"{channel} start-up", out) + leaks(f"{channel} doctor", out_d)
    assert found == [], (found, out[-2000:], out_d[-2000:])


async def test_doctor_and_unreachable_redis_never_print_secrets(tmp_path: Path) -> None:
    llm = await FakeLLMServer().start()
    try:
        closed = free_port()
        env = base_env(
            f"redis://default:{REDIS_PW}@127.0.0.1:{closed}/0",
            llm.openai_url,
            free_port(),
            LOG_LEVEL="DEBUG",
            LLM_API_KEY=LLM_KEY,
            WEB_CHAT_TOKEN=WEB_TOKEN,
            WEB_CHAT_SECRET=WEB_COOKIE,
        )
        llm.push(openai_error(401, "invalid_api_key", "bad key"))
        _code_d, out_d = await _cli(env, "doctor", timeout=40)
        code_r, out_r = await _cli(env, "run", "all", timeout=40)
    finally:
        await llm.stop()
    assert code_r != 0
    found = leaks("doctor", out_d) + leaks("run with unreachable redis", out_r)
    assert found == [], (found, out_d[-2000:], out_r[-2000:])
