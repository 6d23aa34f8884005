"""Many processes on one Redis: 1 web + 3 workers as real subprocesses.

1,000 Telegram updates over 100 chats go through the web process's webhook; the
fake LLM answers with every user message it was given since the last answer, so
each reply says exactly which messages it covers.  One worker is SIGKILLed
mid-run.  Every message must be covered by exactly one reply (nothing lost,
nothing answered twice), in order within its chat, with nothing left pending.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_core.store import keys
from agent_core.store.embedded import EmbeddedValkey
from tests.fakes.llm_servers import FakeLLMServer, Reply, openai_stream
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram
from tests.integration.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"\bm(\d+)-(\d+)\b")


def echo_all_since_last_answer(path: str, body: Any) -> Reply:
    msgs = body.get("messages") or []
    tail: list[str] = []
    for m in reversed(msgs):
        if m.get("role") == "assistant":
            break
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            tail.append(m["content"])
    text = "got " + " ".join(reversed(tail))
    return openai_stream([text], model="fake")


def env_for(
    valkey: EmbeddedValkey, tg: FakeTelegram, llm: FakeLLMServer, port: int
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET"))}
    env.update(
        PARLEY_ENV_FILE=os.devnull,
        REDIS_URL=valkey.url,
        PORT=str(port),
        HOST="127.0.0.1",
        PUBLIC_URL=f"http://127.0.0.1:{port}",
        TELEGRAM_BOT_TOKEN=TOKEN,
        TELEGRAM_API_BASE_URL=tg.base_url,
        TELEGRAM_WEBHOOK_SECRET=WEBHOOK_SECRET,
        TELEGRAM_MODE="webhook",
        LLM_BACKEND="openai_compatible",
        LLM_BASE_URL=llm.openai_url,
        LLM_MODEL="fake",
        LLM_MAX_RETRIES="0",
        DM_POLICY="open",
        USER_RATE_LIMIT="",
        LOCK_TTL_SECS="10",
        RECLAIM_IDLE_SECS="2",
        SWEEP_INTERVAL_SECS="0.5",
        LOG_LEVEL="WARNING",
    )
    return env


def _on_the_wire(logdir: Path) -> set[str]:
    """Update ids whose reply part was claimed by a worker that died before recording it."""
    found: set[str] = set()
    for log in logdir.glob("*.log"):
        found.update(
            re.findall(r"part \d+:(\d+):\d+ was on the wire when its worker died", log.read_text())
        )
    return found


def _warnings(logdir: Path) -> str:
    """The processes' warning and error lines, for a failure message."""
    out = []
    for log in sorted(logdir.glob("*.log")):
        lines = [
            ln
            for ln in log.read_text(errors="replace").splitlines()
            if "WARNING" in ln or "ERROR" in ln
        ]
        out += [f"{log.name}: {ln[:300]}" for ln in lines[-40:]]
    return "\n".join(out)


async def spawn(role: str, env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    fh = log.open("wb")
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bots.cli", "run", role, env=env, cwd=ROOT, stdout=fh, stderr=fh
    )


@pytest.mark.slow
async def test_thousand_messages_three_workers_one_killed(
    valkey: EmbeddedValkey, redis: Any, tmp_path: Path
) -> None:
    chats, per_chat = 100, 10
    tg = FakeTelegram()
    await tg.start()
    llm = FakeLLMServer(latency=0.05)
    llm.responder = echo_all_since_last_answer
    await llm.start()
    port = free_port()
    env = env_for(valkey, tg, llm, port)
    env["EVENT_LOOP"] = "auto"  # the default, whatever the environment running the tests says
    procs: list[asyncio.subprocess.Process] = []
    try:
        procs.append(await spawn("web", env, tmp_path / "web.log"))
        for i in range(3):
            procs.append(await spawn("worker", env, tmp_path / f"worker{i}.log"))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for _ in range(200):
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            headers = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
            killed = False
            sent = 0
            which: dict[int, tuple[int, int]] = {}  # update id -> (chat, message)
            for n in range(per_chat):
                for c in range(chats):
                    chat_id = 10_000 + c
                    update = tg.message_update(chat_id, f"m{c}-{n}", user_id=chat_id)
                    which[int(update["update_id"])] = (c, n)
                    r = await client.post("/telegram/webhook", json=update, headers=headers)
                    assert r.status_code == 200, r.text
                    sent += 1
                    if sent == 400 and not killed:
                        procs[1].send_signal(signal.SIGKILL)  # a worker dies mid-run
                        killed = True
                await asyncio.sleep(0.05)

        # wait until every message is covered by some reply
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            covered = _coverage(tg)
            if sum(len(v) for v in covered.values()) >= chats * per_chat:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2.0)  # let any straggler (a duplicate) show up
        covered = _coverage(tg)
        total = sum(len(v) for v in covered.values())
        dupes = {c: [m for m in set(v) if v.count(m) > 1] for c, v in covered.items()}
        dupes = {c: d for c, d in dupes.items() if d}
        assert dupes == {}, f"messages answered more than once: {dupes}\n{_warnings(tmp_path)}"
        missing = {c: sorted(set(range(per_chat)) - set(covered.get(c, []))) for c in range(chats)}
        missing = {c: m for c, m in missing.items() if m}
        # The documented price of never answering twice: a reply whose worker was
        # killed between claiming it and the request leaving is not sent again
        # (README, "A worker killed during a platform request"); the log says so.
        # Only such replies may be missing, and only for the one worker killed.
        excused = {which[int(u)] for u in _on_the_wire(tmp_path) if int(u) in which}
        lost = {(c, n) for c, ns in missing.items() for n in ns}
        assert lost <= excused and len(excused) <= 3, (
            f"{len(lost)} messages never answered: {missing} (excused: {excused})\n"
            f"{_warnings(tmp_path)}"
        )
        assert total + len(lost) == chats * per_chat
        for c, order in covered.items():
            assert order == sorted(order), f"chat {c} answered out of order: {order}"
        # nothing left behind
        assert await redis.zcard(keys.ACTIVE_THREADS) == 0
        # ... and all of it ran on `parley run`'s default event loop (EVENT_LOOP=auto)
        for name in ("web", "worker0", "worker2"):  # worker1 was killed
            log = (tmp_path / f"{name}.log").read_text(errors="replace")
            assert "loop:     uvloop" in log, name
        pending = await redis.xpending(keys.INBOX_STREAM, keys.INBOX_GROUP)
        assert pending["pending"] == 0
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.wait_for(p.wait(), 25)
            except TimeoutError:
                p.kill()
        await llm.stop()
        await tg.stop()


def _coverage(tg: FakeTelegram) -> dict[int, list[int]]:
    """chat -> message numbers covered by the bot's messages (final text), in message order."""
    out: dict[int, list[int]] = {}
    for (chat_id, _mid), stored in sorted(tg.messages.items()):
        if chat_id < 10_000:
            continue
        for m in MARK.finditer(stored.text or ""):
            out.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    return out
