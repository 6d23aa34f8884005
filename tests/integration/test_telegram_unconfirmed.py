"""Telegram sends and edits whose answer never came back (a timeout or a 504 after
the request left), end to end: real runtime, real python-telegram-bot, fake Bot API.

The rule: never answer twice (a send that may have arrived is not repeated), but
what certainly never left is still sent, and edits (safe to repeat) are repeated.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
from redis.asyncio import Redis

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, TextDelta
from agent_core.store import keys
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from tests.fakes.llm_servers import ScriptedProvider
from tests.fakes.telegram import BOT_ID, WEBHOOK_SECRET, FakeTelegram
from tests.fakes.telegram_checks import ApiError
from tests.integration.telegram_runtime import telegram_settings

USER = 555
THREAD = ThreadKey("telegram", str(BOT_ID), str(USER))
FULL = "The full answer: " + "word " * 40 + "done."
# Three paragraphs of ~3.6k characters each: one Telegram message apiece.
PARAS = [f"Paragraph {i}: " + "lorem ipsum " * 300 + "end." for i in range(3)]
LONG = "\n\n".join(PARAS)


class TimeoutOnSend(FakeTelegram):
    """Carries out the ``nth`` sendMessage, then answers it with a 504 (the message
    exists; the bot cannot know)."""

    def __init__(self, nth: int) -> None:
        super().__init__()
        self.nth = nth
        self.sends = 0

    async def _dispatch(self, method: str, p: dict[str, Any]) -> Any:
        result = await super()._dispatch(method, p)
        if method == "sendMessage":
            self.sends += 1
            if self.sends == self.nth:
                raise ApiError(504, "Gateway Time-out", gateway=True)
        return result


def texts(fake: FakeTelegram) -> list[str]:
    """The user's chat as it shows now, oldest first."""
    return [m.text for (c, _), m in sorted(fake.messages.items()) if c == USER]


async def _idle(redis: Redis) -> bool:
    return not await redis.exists(keys.lock(THREAD)) and not await redis.llen(keys.mailbox(THREAD))


async def answer(
    valkey: EmbeddedValkey,
    redis: Redis,
    fake: FakeTelegram,
    llm: ScriptedProvider,
    setup: Callable[[FakeTelegram], None] | None = None,
    **telegram: Any,
) -> list[str]:
    """Ask one question and wait for the turn to end (the model was asked, the
    thread's lock is free, nothing queued); the chat's texts then."""
    await fake.start()
    try:
        limits: dict[str, Any] = {
            "telegram_chat_interval_secs": 0.05,
            "telegram_group_interval_secs": 0.05,
            "telegram_global_rate": 0,
        }
        settings = telegram_settings(valkey.url, fake, **(limits | telegram))
        async with Runtime(settings, "all", llm=llm) as rt:
            stop = asyncio.Event()
            assert rt.worker is not None
            task = asyncio.create_task(rt.worker.run(stop))
            try:
                if setup is not None:
                    setup(fake)
                transport = httpx.ASGITransport(app=rt.web_app())
                async with httpx.AsyncClient(transport=transport, base_url="http://p") as client:
                    r = await client.post(
                        "/telegram/webhook",
                        json=fake.message_update(USER, "question", user_id=USER),
                        headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
                    )
                    assert r.status_code == 200, r.text
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    if llm.calls and await _idle(redis):
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError("the turn did not end in time")
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
        return texts(fake)
    finally:
        await fake.stop()


async def test_an_unconfirmed_preview_that_differs_only_by_a_newline_is_not_answered_again(
    valkey: EmbeddedValkey, redis: Redis
) -> None:
    """The model's text ends in a newline; the turn finishes with it stripped.  The
    preview (stored, then a 504) already shows the whole answer: not sent again."""
    fake = FakeTelegram()
    llm = ScriptedProvider("scripted:model", default="The answer is 42.\n")

    def setup(f: FakeTelegram) -> None:
        f.fail_next("sendMessage", 504, "Gateway Time-out", gateway=True, after=True)

    assert await answer(valkey, redis, fake, llm, setup) == ["The answer is 42."]


async def test_a_final_edit_that_times_out_is_made_again(
    valkey: EmbeddedValkey, redis: Redis
) -> None:
    """Edits are safe to repeat: a 504 on the final edit is retried, and the user
    sees the whole answer (no cut-short preview, no failure notice)."""
    fake = FakeTelegram()
    llm = ScriptedProvider(
        "scripted:model", [TextDelta("The full"), Completion(FULL, provider="scripted:model")]
    )

    def setup(f: FakeTelegram) -> None:
        f.fail_next("editMessageText", 504, "Gateway Time-out", gateway=True)

    assert await answer(valkey, redis, fake, llm, setup) == [FULL]


def _in_full(shown: list[str]) -> None:
    """Every paragraph reaches the user whole, in order, and once."""
    assert shown == PARAS


async def test_a_middle_message_of_a_long_answer_that_times_out_does_not_lose_the_rest(
    valkey: EmbeddedValkey, redis: Redis
) -> None:
    """Three messages, the 2nd stored and then answered 504: it is not sent again,
    and the 3rd (which never left) is still sent."""
    fake = TimeoutOnSend(2)
    llm = ScriptedProvider("scripted:model", default=LONG)
    _in_full(await answer(valkey, redis, fake, llm))
    assert fake.sends == 3


async def test_a_continuation_made_by_the_final_edit_that_times_out_does_not_lose_the_rest(
    valkey: EmbeddedValkey, redis: Redis
) -> None:
    """A streamed answer whose final edit grows into three messages: the 2nd times
    out, the 3rd is sent all the same, and the turn does not fail."""
    fake = TimeoutOnSend(2)
    llm = ScriptedProvider(
        "scripted:model",
        [TextDelta("Paragraph 0: lorem"), Completion(LONG, provider="scripted:model")],
    )
    _in_full(await answer(valkey, redis, fake, llm))
    assert fake.sends == 3


class SlowStream(ScriptedProvider):
    """Streams the three paragraphs a while apart (streamed edits in between)."""

    async def stream(self, request: Any) -> Any:
        self.calls.append(request)
        for i, p in enumerate(PARAS):
            yield TextDelta(p if i == 0 else "\n\n" + p)
            await asyncio.sleep(0.5)
        yield Completion(LONG, provider=self.name)


async def test_a_streamed_continuation_that_times_out_is_not_shown_twice(
    valkey: EmbeddedValkey, redis: Redis
) -> None:
    """The answer outgrows its first message while streaming; the message that
    continues it is stored and answered 504.  It is never sent a second time,
    and nothing after it is lost."""
    fake = TimeoutOnSend(2)
    shown = await answer(
        valkey, redis, fake, SlowStream("scripted:model"), telegram_chat_interval_secs=0.1
    )
    _in_full(shown)
    assert fake.sends == 3


async def test_a_two_message_answer_in_one_chunk_whose_first_send_times_out_keeps_the_second(
    valkey: EmbeddedValkey, redis: Redis
) -> None:
    """Two messages' worth of text arriving as one delta (a response-cache hit, a
    backend that does not stream): the preview holds the second message back, and
    its only message sent is stored, then answered 504.  The second, which never
    left, is still sent (the preview could not be edited to add it later)."""
    fake = TimeoutOnSend(1)
    llm = ScriptedProvider("scripted:model", default="\n\n".join(PARAS[:2]))
    assert await answer(valkey, redis, fake, llm) == PARAS[:2]
    assert fake.sends == 2


async def test_a_first_delta_of_two_messages_whose_first_send_times_out_is_not_resent(
    valkey: EmbeddedValkey, redis: Redis
) -> None:
    """The first streamed delta already spans two messages and the first send is
    stored, then answered 504: the growing second message is sent at once and
    edited as the answer grows, so the first is not repeated and nothing is lost."""
    fake = TimeoutOnSend(1)
    llm = ScriptedProvider(
        "scripted:model",
        [
            TextDelta(PARAS[0] + "\n\n" + PARAS[1][:1000]),
            Completion(LONG, provider="scripted:model"),
        ],
    )
    _in_full(await answer(valkey, redis, fake, llm))
    assert fake.sends == 3
