"""A Telegram group upgraded to a supergroup, end to end: the real runtime (webhook,
worker, agent with the demo model), the real python-telegram-bot, the fake Bot API.

What the group's people see: an answer being streamed when the group is upgraded
arrives once, in the supergroup; the next message there continues the same
conversation; an approval asked before the upgrade can still be decided with
its button; Telegram redelivering its notices changes nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from agent_core.agent.session import Session, ThreadState
from agent_core.events import ThreadKey
from agent_core.llm.demo import LABEL, DemoProvider
from agent_core.store import keys
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from tests.fakes.telegram import BOT_ID, BOT_USERNAME, WEBHOOK_SECRET, FakeTelegram
from tests.integration.telegram_runtime import telegram_settings

GROUP = -4242
USER = 555
DEMO_NOTE = "Demo model: offline canned answers"


@pytest.fixture
async def stack(valkey: EmbeddedValkey, redis: Redis) -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram()
    await fake.start()
    settings = telegram_settings(
        valkey.url,
        fake,
        core={"sweep_interval_secs": 0.2},
        telegram_chat_interval_secs=0.2,
        telegram_group_interval_secs=0.2,
    )
    async with Runtime(settings, "all", llm=DemoProvider(delay=0.04)) as rt:
        stop = asyncio.Event()
        assert rt.worker is not None
        task = asyncio.create_task(rt.worker.run(stop))
        fake.webhook_transport = httpx.ASGITransport(app=rt.web_app())
        fake.webhook = {"url": "http://parley/telegram/webhook", "secret_token": WEBHOOK_SECRET}
        fake.set_chat(GROUP, "group", title="Team")
        try:
            yield fake
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    await fake.stop()


async def say(fake: FakeTelegram, chat: int, text: str) -> None:
    update = fake.message_update(chat, f"@{BOT_USERNAME} {text}", user_id=USER)
    assert await fake.deliver(update) == 200


async def wait_until(pred: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def wait_for_redis(pred: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def bot_texts(fake: FakeTelegram, chat: int) -> list[str]:
    """What the chat shows from the bot now (edited messages as they are now)."""
    return [m.text for m in fake.messages.values() if m.chat_id == chat]


def thread(chat: int) -> ThreadKey:
    return ThreadKey("telegram", str(BOT_ID), str(chat))


async def session(redis: Redis, chat: int) -> Session | None:
    ver, data = await redis.hmget(keys.session(thread(chat)), "v", "d")
    return Session.load(str(thread(chat)), int(ver or 0), data) if data else None


async def test_streamed_answer_crosses_the_upgrade_and_the_conversation_goes_on(
    stack: FakeTelegram, redis: Redis
) -> None:
    fake = stack
    await say(fake, GROUP, "tell me how a group of friends grows into a big community")
    await wait_until(lambda: bot_texts(fake, GROUP))  # the answer is streaming
    m = await fake.migrate(GROUP)  # delivers both notices to the webhook

    def done() -> bool:
        return any(t.endswith("long.") for t in bot_texts(fake, m.new))

    await wait_until(done)
    await asyncio.sleep(0.5)  # anything sent twice would show by now
    answers = [t for t in bot_texts(fake, m.new) if "You said" in t]
    assert len(answers) == 1 and answers[0].endswith("long.")
    assert DEMO_NOTE in answers[0] and DEMO_NOTE in LABEL  # a conversation's first answer
    old = bot_texts(fake, GROUP)
    assert len(old) == 1 and not old[0].endswith("long.")  # the cut-short preview stays
    assert any(
        c.method == "editMessageText" and c.status == 400 and int(c.params["chat_id"]) == GROUP
        for c in fake.calls
    )

    # the conversation moved: the next message there continues it
    await wait_for_redis(lambda: redis.exists(keys.moved(thread(GROUP))))
    await say(fake, m.new, "and then?")
    await wait_until(lambda: any("and then?" in t for t in bot_texts(fake, m.new)))
    await wait_for_redis(lambda: _idle(redis, m.new))
    reply = next(t for t in bot_texts(fake, m.new) if "and then?" in t)
    assert DEMO_NOTE not in reply  # the demo model labels only a conversation's first answer
    s = await session(redis, m.new)
    assert s is not None
    users = [x.content for x in s.history if x.role == "user"]
    assert len(users) == 2 and "big community" in users[0] and "and then?" in users[1]
    assert await session(redis, GROUP) is None

    # Telegram delivers both notices again: nothing moves twice, nothing is said
    shown = bot_texts(fake, m.new)
    for update in m.updates:
        assert await fake.deliver(update) == 200
    await asyncio.sleep(0.8)
    again = await session(redis, m.new)
    assert again is not None and again.history == s.history and again.version == s.version
    assert bot_texts(fake, m.new) == shown


async def _idle(redis: Redis, chat: int) -> bool:
    t = thread(chat)
    return not await redis.exists(keys.lock(t)) and not await redis.llen(keys.mailbox(t))


async def test_an_approval_asked_in_the_group_is_decided_in_the_supergroup(
    stack: FakeTelegram, redis: Redis
) -> None:
    fake = stack
    await say(fake, GROUP, "demo an approval")

    def prompt() -> Any:
        return next(
            (x for x in fake.messages.values() if x.chat_id == GROUP and x.reply_markup), None
        )

    await wait_until(lambda: prompt() is not None)
    p = prompt()
    approve = p.reply_markup["inline_keyboard"][0][0]["callback_data"]
    m = await fake.migrate(GROUP)
    # the move's second step writes the session there (its first only fences the group)
    await wait_for_redis(lambda: redis.exists(keys.moved_in(thread(m.new))))
    s = await session(redis, m.new)
    assert s is not None and s.state == ThreadState.AWAITING_APPROVAL

    # the button on the prompt in the old group
    press = fake.press(GROUP, p.message_id, approve, user_id=USER)
    assert await fake.deliver(press) == 200
    cq = press["callback_query"]["id"]
    await wait_until(lambda: cq in fake.answered)
    await wait_until(lambda: any("demo action ran" in t for t in bot_texts(fake, m.new)))
    await wait_for_redis(lambda: _idle(redis, m.new))
    await asyncio.sleep(0.3)
    assert await redis.llen(keys.demo_notes(thread(m.new))) == 1  # ran once, there
    assert await redis.llen(keys.demo_notes(thread(GROUP))) == 0
    assert len([t for t in bot_texts(fake, m.new) if "demo action ran" in t]) == 1
    # the decision is shown in the supergroup (the old prompt cannot be edited any more)
    assert any("Approved" in t for t in bot_texts(fake, m.new))
    s = await session(redis, m.new)
    assert s is not None and s.state == ThreadState.IDLE
