"""Platform faults on send (Telegram, through the real python-telegram-bot against the
fake Bot API): 429 with retry_after, 5xx, a send that times out *after* Telegram
stored the message, and formatting rejections.  The answer must arrive exactly once
(a timed-out send is not blindly repeated) and formatting falls back to plain text.

Real subprocesses: 1 web (webhook) + 1 worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from agent_core.store.embedded import EmbeddedValkey
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram
from tests.faults.harness import Cluster, wait_drained

SLOW_SECS = 6.0  # longer than python-telegram-bot's 5 s read timeout


class SlowTelegram(FakeTelegram):
    """Can store a message and then answer too late (the bot times out)."""

    def __init__(self) -> None:
        super().__init__()
        self.slow: dict[str, int] = {}

    async def _dispatch(self, method: str, p: dict[str, Any]) -> Any:
        result = await super()._dispatch(method, p)
        if self.slow.get(method, 0) > 0:
            self.slow[method] -= 1
            await asyncio.sleep(SLOW_SECS)
        return result


@pytest.fixture(scope="module")
async def tg() -> AsyncIterator[SlowTelegram]:
    fake = SlowTelegram()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture(scope="module")
async def cluster(
    valkey: EmbeddedValkey, tg: SlowTelegram, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster]:
    """One web + one worker for the whole module (each test uses its own chat)."""
    redis = Redis.from_url(valkey.url)
    await redis.flushdb()
    await redis.aclose()
    c = Cluster(
        valkey.url,
        tmp_path_factory.mktemp("platform-faults"),
        workers=1,
        llm_latency=0.0,
        env={
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_API_BASE_URL": tg.base_url,
            "TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "TELEGRAM_MODE": "webhook",
            "WEB_CHAT_ENABLED": "false",
        },
    )
    c.extra_env["PUBLIC_URL"] = f"http://127.0.0.1:{c.port}"
    await c.start()
    yield c
    await c.stop()


async def _say(cluster: Cluster, tg: FakeTelegram, chat: int, text: str) -> None:
    update = tg.message_update(chat, text, user_id=chat)
    async with httpx.AsyncClient(base_url=cluster.base_url, timeout=10) as c:
        r = await c.post(
            "/telegram/webhook",
            json=update,
            headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
        )
    assert r.status_code == 200, r.text


def _answers(tg: FakeTelegram, chat: int, mark: str) -> list[str]:
    return [m.text for (c, _), m in sorted(tg.messages.items()) if c == chat and mark in m.text]


async def _wait_answer(tg: FakeTelegram, chat: int, mark: str, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = _answers(tg, chat, mark)
        if got and all(t.startswith("got ") and t.endswith(mark) for t in got):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # a blind repeat would show up now
    return _answers(tg, chat, mark)


CASES = [
    pytest.param(
        "429 retry_after", lambda tg: tg.fail_next("sendMessage", 429, retry_after=1), id="429"
    ),
    pytest.param(
        "429 on the final edit",
        lambda tg: tg.fail_next("editMessageText", 429, retry_after=1),
        id="429-edit",
    ),
    pytest.param(
        "formatting rejected",
        lambda tg: tg.fail_next(
            "sendMessage", 400, "Bad Request: can't parse entities: Can't find end of bold entity"
        ),
        id="formatting",
    ),
    pytest.param(
        "formatting rejected on edit",
        lambda tg: tg.fail_next(
            "editMessageText", 400, "Bad Request: can't parse entities: Character '.' is reserved"
        ),
        id="formatting-edit",
    ),
    pytest.param(
        "timeout after reaching Telegram",
        lambda tg: tg.slow.__setitem__("sendMessage", 1),
        id="timeout-after-delivery",
    ),
    pytest.param(
        "5xx on send",
        lambda tg: tg.fail_next("sendMessage", 502, "Bad Gateway"),
        id="5xx",
    ),
    pytest.param(
        "504 from Telegram's proxy after the message was created",
        lambda tg: tg.fail_next("sendMessage", 504, "Gateway Time-out", gateway=True, after=True),
        id="504-created",
    ),
    pytest.param(
        "502 from Telegram's proxy (nginx page)",
        lambda tg: tg.fail_next("sendMessage", 502, "Bad Gateway", gateway=True),
        id="502-html",
    ),
    pytest.param(
        "5xx on the final edit",
        lambda tg: tg.fail_next("editMessageText", 502, "Bad Gateway"),
        id="5xx-edit",
    ),
]


@pytest.mark.parametrize(("case", "inject"), CASES)
async def test_platform_fault_answer_arrives_once(
    case: str, inject: Any, cluster: Cluster, tg: SlowTelegram, valkey: EmbeddedValkey
) -> None:
    chat = 5000 + len(tg.chats)
    inject(tg)
    await _say(cluster, tg, chat, "m1-0")
    got = await _wait_answer(tg, chat, "m1-0", SLOW_SECS + 3)
    assert len(got) == 1, f"{case}: expected exactly one answer, got {got}"
    assert got[0].startswith("got ") and got[0].endswith("m1-0"), got
    redis = Redis.from_url(valkey.url)
    try:
        assert sum((await wait_drained(redis, 10)).values()) == 0
    finally:
        await redis.aclose()
