"""A press that lands while the worker is finishing the thread's previous turn.

Found by the approval end-to-end tests under load (a press right after the prompt
showed stalled for LOCK_TTL_SECS).  Deterministic repro: widen the window between
the completion script (which deletes the thread lock when the mailbox is empty) and
the thread task leaving ``Worker.running``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from approvals_harness import process, settings_for, wait_until
from redis.asyncio import Redis

from agent_core.store.embedded import EmbeddedValkey
from channels import telegram as telegram_pkg
from channels.telegram.settings import TelegramSettings
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram

USER = 555


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    await server.start()
    yield server
    await server.stop()


async def test_event_handed_off_while_the_thread_task_finishes_is_run(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeTelegram
) -> None:
    platform = TelegramSettings(
        telegram_bot_token=TOKEN,  # type: ignore[arg-type]
        telegram_api_base_url=fake.base_url,
        telegram_webhook_secret=WEBHOOK_SECRET,  # type: ignore[arg-type]
        telegram_mode="webhook",
    )
    settings = settings_for(valkey, "telegram", platform, telegram_pkg)
    async with process(settings, "all") as rt:
        assert rt.delivery is not None and rt.worker is not None
        original = rt.delivery.complete
        finishing = asyncio.Event()

        async def slow_complete(thread: Any, owner: str, **kw: Any) -> int:
            left = await original(thread, owner, **kw)
            finishing.set()
            await asyncio.sleep(0.5)  # the thread task is still in Worker.running
            return left

        rt.delivery.complete = slow_complete  # type: ignore[method-assign]
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:

            async def post(text: str) -> None:
                r = await client.post(
                    "/telegram/webhook",
                    json=fake.message_update(USER, text, user_id=USER),
                    headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
                )
                assert r.status_code == 200

            def answers() -> list[str]:
                return [m.text for m in fake.messages.values() if "You said" in m.text]

            await post("first message")
            await wait_until(lambda: finishing.is_set(), what="turn 1 to complete")
            await post("second message")  # handed off inside the window
            await wait_until(
                lambda: any("second message" in t for t in answers()),
                timeout=6,
                what="the second message's answer (the lock would expire after 30 s)",
            )
