"""Approvals end to end on Telegram: real Runtime, real python-telegram-bot, fake Bot API.

Presses are callback queries posted to the webhook, as Telegram sends them;
what the tests check is what the fake Bot API shows: the prompt's text and
inline keyboard, and the answerCallbackQuery of every press.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from approvals_harness import (
    ASK,
    RAN,
    demo_runs,
    process,
    settings_for,
    settle,
    turn_finished,
    wait_expired,
    wait_until,
)
from redis.asyncio import Redis

from agent_core.llm.base import CompletionRequest, StreamItem
from agent_core.llm.demo import DemoProvider
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from bots.settings import Settings
from channels import telegram as telegram_pkg
from channels.telegram import refs
from channels.telegram import sender as telegram_sender
from channels.telegram.settings import TelegramSettings
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram, StoredMessage

USER = 555
STRANGER = 777


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    await server.start()
    yield server
    await server.stop()


def make_settings(valkey: EmbeddedValkey, fake: FakeTelegram, **core: Any) -> Settings:
    platform = TelegramSettings(
        telegram_bot_token=TOKEN,  # type: ignore[arg-type]
        telegram_api_base_url=fake.base_url,
        telegram_webhook_secret=WEBHOOK_SECRET,  # type: ignore[arg-type]
        telegram_mode="webhook",
    )
    return settings_for(valkey, "telegram", platform, telegram_pkg, **core)


class Webhook:
    """Posts updates to a Runtime's webhook, as Telegram does."""

    def __init__(self, rt: Runtime, client: httpx.AsyncClient) -> None:
        self.rt = rt
        self.client = client

    async def __call__(self, update: dict[str, Any]) -> None:
        r = await self.client.post(
            "/telegram/webhook",
            json=update,
            headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
        )
        assert r.status_code == 200, r.text


@contextlib.asynccontextmanager
async def served(settings: Settings, llm: Any = None) -> AsyncIterator[Webhook]:
    """A Runtime (role all) and its webhook."""
    async with process(settings, "all", llm) as rt:
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:
            yield Webhook(rt, client)


def prompt_of(fake: FakeTelegram) -> StoredMessage | None:
    for m in fake.messages.values():
        if m.chat_id == USER and m.reply_markup:
            return m
    return None


async def ask(fake: FakeTelegram, post: Webhook) -> tuple[StoredMessage, dict[str, str]]:
    """The user asks; the prompt and its buttons (label -> callback_data)."""
    await post(fake.message_update(USER, ASK, user_id=USER))
    prompt = await wait_until(lambda: prompt_of(fake), what="the approval prompt")
    await turn_finished(post.rt)
    buttons = {b["text"]: b["callback_data"] for b in prompt.reply_markup["inline_keyboard"][0]}
    assert list(buttons) == ["Approve", "Always", "Deny"]
    return prompt, buttons


def texts(fake: FakeTelegram) -> list[str]:
    return [m.text for m in fake.messages.values() if m.chat_id == USER]


async def answered(fake: FakeTelegram, press: dict[str, Any]) -> str | None:
    cq = press["callback_query"]["id"]
    await wait_until(lambda: cq in fake.answered, what=f"the answer to press {cq}")
    return fake.answered[cq]


async def test_requester_press_runs_the_tool_once(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeTelegram
) -> None:
    async with served(make_settings(valkey, fake)) as post:
        prompt, buttons = await ask(fake, post)
        press = fake.press(USER, prompt.message_id, buttons["Approve"], user_id=USER)
        await post(press)
        assert await answered(fake, press) is None  # acknowledged, silently
        await wait_until(lambda: fake.message(USER, prompt.message_id).reply_markup is None)
        assert "Approved" in fake.message(USER, prompt.message_id).text
        await wait_until(lambda: any(RAN in t for t in texts(fake)), what="the tool's result")
        await settle()
    assert await demo_runs(redis) == 1
    assert len([t for t in texts(fake) if RAN in t]) == 1


async def test_someone_elses_press_is_refused_privately(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeTelegram
) -> None:
    async with served(make_settings(valkey, fake)) as post:
        prompt, buttons = await ask(fake, post)
        before = texts(fake)
        press = fake.press(USER, prompt.message_id, buttons["Approve"], user_id=STRANGER)
        await post(press)
        notice = await answered(fake, press)
        assert notice is not None and "can decide" in notice
        await settle()
        shown = fake.message(USER, prompt.message_id)
        assert shown.reply_markup == prompt.reply_markup  # buttons stay
        assert "Approved" not in shown.text
        assert texts(fake) == before  # nothing said in the chat
    assert await demo_runs(redis) == 0


async def test_double_press_runs_once(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeTelegram
) -> None:
    async with served(make_settings(valkey, fake)) as post:
        prompt, buttons = await ask(fake, post)
        first = fake.press(USER, prompt.message_id, buttons["Approve"], user_id=USER)
        second = fake.press(USER, prompt.message_id, buttons["Approve"], user_id=USER)
        await post(first)
        await post(second)
        answers = [await answered(fake, first), await answered(fake, second)]
        assert answers[0] is None
        assert answers[1] is not None and "Already decided" in answers[1]
        await wait_until(lambda: any(RAN in t for t in texts(fake)), what="the tool's result")
        await settle()
        assert fake.message(USER, prompt.message_id).reply_markup is None
    assert await demo_runs(redis) == 1
    assert len([t for t in texts(fake) if RAN in t]) == 1


async def test_press_after_expiry_runs_nothing(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeTelegram
) -> None:
    async with served(make_settings(valkey, fake, approval_ttl_secs=1)) as post:
        prompt, buttons = await ask(fake, post)
        await wait_expired(redis)
        press = fake.press(USER, prompt.message_id, buttons["Approve"], user_id=USER)
        await post(press)
        notice = await answered(fake, press)
        assert notice is not None and "expired" in notice
        await wait_until(lambda: fake.message(USER, prompt.message_id).reply_markup is None)
        assert "Expired" in fake.message(USER, prompt.message_id).text
        await settle()
    assert await demo_runs(redis) == 0
    assert not any(RAN in t for t in texts(fake))


async def test_an_unanswered_prompt_loses_its_buttons_when_it_expires(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeTelegram
) -> None:
    """Nobody presses: the scheduler's timer closes the prompt on Telegram itself
    (its tick is called here with a clock past the expiry; the scheduler calls it
    every SCHEDULER_TICK_SECS)."""
    from agent_core.proactive.approval_expiry import ApprovalExpiry

    async with served(make_settings(valkey, fake)) as post:
        prompt, _buttons = await ask(fake, post)
        assert prompt.reply_markup is not None
        rt = post.rt
        assert rt.clients is not None and rt.ingest is not None
        timer = ApprovalExpiry(rt.clients.redis, rt.ingest)
        assert await timer.tick(time.time()) == 0  # it has 30 minutes
        assert await timer.tick(time.time() + 1800 + 2) == 1
        await wait_until(lambda: fake.message(USER, prompt.message_id).reply_markup is None)
        assert "Expired" in fake.message(USER, prompt.message_id).text
        await settle()
    assert await demo_runs(redis) == 0
    assert not any(RAN in t for t in texts(fake))


async def test_press_after_a_restart(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeTelegram
) -> None:
    settings = make_settings(valkey, fake)
    async with served(settings) as post:
        prompt, buttons = await ask(fake, post)
    # every process is gone; a new one on the same Redis takes the press
    async with served(make_settings(valkey, fake)) as post:
        press = fake.press(USER, prompt.message_id, buttons["Approve"], user_id=USER)
        await post(press)
        assert await answered(fake, press) is None
        await wait_until(lambda: fake.message(USER, prompt.message_id).reply_markup is None)
        assert "Approved" in fake.message(USER, prompt.message_id).text
        await wait_until(lambda: any(RAN in t for t in texts(fake)), what="the tool's result")
        await settle()
    assert await demo_runs(redis) == 1


class GatedAfterTool(DemoProvider):
    """The demo model, whose answer after a tool ran waits until ``gate`` opens:
    a turn that is provably still running."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        if request.messages and request.messages[-1].role == "tool":
            self.waiting.set()
            await self.gate.wait()
        async for item in super().stream(request):
            yield item


async def test_press_behind_a_running_turn_is_answered_in_time(
    valkey: EmbeddedValkey, redis: Redis, fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Telegram takes a press's answer for ~10-15 s; the note comes PRESS_NOTE_AFTER
    # after the press arrived (shortened here) if its own turn has not answered it.
    monkeypatch.setattr(telegram_sender, "PRESS_NOTE_AFTER", 0.3)
    reported: list[str] = []  # callback ids the worker reported as waiting
    real = telegram_sender.TelegramOutbox.press_waiting

    def press_waiting(self: telegram_sender.TelegramOutbox, event: Any) -> None:
        reported.append(refs.decode_callback(event.reply_ref.extra))
        real(self, event)

    monkeypatch.setattr(telegram_sender.TelegramOutbox, "press_waiting", press_waiting)
    llm = GatedAfterTool()
    async with served(make_settings(valkey, fake), llm) as post:
        prompt, buttons = await ask(fake, post)
        first = fake.press(USER, prompt.message_id, buttons["Approve"], user_id=USER)
        await post(first)
        assert await answered(fake, first) is None  # its turn ran at once: no note
        await wait_until(llm.waiting.is_set, what="the turn to wait on the model")
        second = fake.press(USER, prompt.message_id, buttons["Approve"], user_id=USER)
        await post(second)
        # the first press's turn is still running (the model waits on the gate)
        assert await answered(fake, second) == telegram_sender.PRESS_NOTE
        assert not any(RAN in t for t in texts(fake))
        llm.gate.set()
        await wait_until(lambda: any(RAN in t for t in texts(fake)), what="the tool's result")
        await turn_finished(post.rt)
        await settle()
    assert await demo_runs(redis) == 1

    def attempts(press: dict[str, Any]) -> list[tuple[int, str | None]]:
        cq = press["callback_query"]["id"]
        return [
            (c.status, c.params.get("text"))
            for c in fake.calls
            if c.method == "answerCallbackQuery" and c.params.get("callback_query_id") == cq
        ]

    # the first press ran at once: not reported, answered by its own turn alone
    assert reported == [second["callback_query"]["id"]]
    assert attempts(first) == [(200, None)]
    # the note, then its own turn's "already decided", too late: Telegram refuses it
    note, own = attempts(second)
    assert note == (200, telegram_sender.PRESS_NOTE)
    assert own[0] == 400 and own[1] is not None and "Already decided" in own[1]
