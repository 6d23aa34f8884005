"""Approvals end to end on Telegram: real runtime, real python-telegram-bot, fake Bot API.

The demo model asks for a harmless tool that needs approval; the prompt arrives
as an inline keyboard; presses come back as callback queries through the
webhook.  Someone else's press is refused privately, the requester's press runs
the tool, every press is answered, and the prompt loses its keyboard.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agent_core.llm.demo import DemoProvider
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from tests.fakes.telegram import WEBHOOK_SECRET, FakeTelegram
from tests.integration.telegram_runtime import telegram_settings

USER = 555
STRANGER = 777


@pytest.fixture
async def stack(
    valkey: EmbeddedValkey, redis: Any
) -> AsyncIterator[tuple[Runtime, FakeTelegram, httpx.AsyncClient]]:
    fake = FakeTelegram()
    await fake.start()
    settings = telegram_settings(valkey.url, fake, core={"sweep_interval_secs": 0.2})
    async with Runtime(settings, "all", llm=DemoProvider()) as rt:
        stop = asyncio.Event()
        assert rt.worker is not None
        task = asyncio.create_task(rt.worker.run(stop))
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:
            try:
                yield rt, fake, client
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
    await fake.stop()


async def post(client: httpx.AsyncClient, update: dict[str, Any]) -> None:
    r = await client.post(
        "/telegram/webhook",
        json=update,
        headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
    )
    assert r.status_code == 200, r.text


async def wait_until(pred: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def prompt_of(fake: FakeTelegram) -> Any:
    for m in fake.messages.values():
        if m.chat_id == USER and m.reply_markup:
            return m
    return None


async def test_approval_through_telegram_buttons(stack: Any) -> None:
    _rt, fake, client = stack
    await post(client, fake.message_update(USER, "demo an approval", user_id=USER))
    await wait_until(lambda: prompt_of(fake) is not None)
    prompt = prompt_of(fake)
    buttons = prompt.reply_markup["inline_keyboard"][0]
    assert [b["text"] for b in buttons] == ["Approve", "Always", "Deny"]
    assert all(len(b["callback_data"].encode()) <= 64 for b in buttons)
    approve = buttons[0]["callback_data"]

    # a stranger presses: refused privately, nothing runs, the keyboard stays
    stranger_press = fake.press(USER, prompt.message_id, approve, user_id=STRANGER)
    await post(client, stranger_press)
    cq_stranger = stranger_press["callback_query"]["id"]
    await wait_until(lambda: cq_stranger in fake.answered)
    assert "approver" in (fake.answered[cq_stranger] or "")
    assert fake.message(USER, prompt.message_id).reply_markup

    # the requester presses (twice: a double click)
    first = fake.press(USER, prompt.message_id, approve, user_id=USER)
    second = fake.press(USER, prompt.message_id, approve, user_id=USER)
    await post(client, first)
    await post(client, second)
    await wait_until(lambda: fake.message(USER, prompt.message_id).reply_markup is None)
    for press in (first, second):
        cq = press["callback_query"]["id"]
        await wait_until(lambda cq=cq: cq in fake.answered)  # every press answered
    edited = fake.message(USER, prompt.message_id).text
    assert "Approved" in edited

    def texts() -> list[str]:  # what the chat shows now (streamed messages edited in place)
        return [m.text for m in fake.messages.values() if m.chat_id == USER]

    await wait_until(lambda: any("demo action ran" in t for t in texts()))
    await asyncio.sleep(0.5)
    ran = [t for t in texts() if "demo action ran" in t]
    assert len(ran) == 1, "the tool result was reported more than once"
