"""A group upgraded to a supergroup, through the real python-telegram-bot and the fake:
sends, edits and typing follow the group; its two notices become one MOVED event."""

from __future__ import annotations

import asyncio

import httpx
from redis.asyncio import Redis

from agent_core.events import EventKind, OutboundMessage, ThreadKey
from agent_core.ingest import Ingest
from agent_core.store import keys
from agent_core.store.pacing import Pacer
from channels.telegram import TelegramChannel, refs
from channels.telegram.polling import Poller
from channels.telegram.sender import TelegramOutbox
from tests.fakes.telegram import MIGRATED, FakeTelegram
from tests.integration.telegram.conftest import FAST

GROUP_ID = -4242
GROUP = ThreadKey("telegram", "123456", str(GROUP_ID))


def calls_to(fake: FakeTelegram, method: str, chat_id: int) -> list[int]:
    """The statuses of ``method`` calls naming ``chat_id``, in order."""
    return [
        c.status
        for c in fake.calls
        if c.method == method and int(c.params.get("chat_id", 0)) == chat_id
    ]


async def test_fake_answers_like_telegram(fake: FakeTelegram, channel: TelegramChannel) -> None:
    fake.set_chat(GROUP_ID, "group")
    m = await fake.migrate(GROUP_ID, emit=False)
    assert str(m.new).startswith("-100") and len(str(m.new)) == 14
    async with httpx.AsyncClient() as client:
        r = await client.post(
            f"{fake.base_url}{fake.token}/sendMessage", json={"chat_id": GROUP_ID, "text": "x"}
        )
    assert r.status_code == 400
    assert r.json() == {
        "ok": False,
        "error_code": 400,
        "description": MIGRATED,
        "parameters": {"migrate_to_chat_id": m.new},
    }
    old_msg, new_msg = m.updates[0]["message"], m.updates[1]["message"]
    assert old_msg["chat"]["id"] == GROUP_ID and old_msg["migrate_to_chat_id"] == m.new
    assert new_msg["chat"]["type"] == "supergroup" and new_msg["migrate_from_chat_id"] == GROUP_ID


async def test_send_goes_to_the_supergroup_once_and_is_remembered(
    fake: FakeTelegram, channel: TelegramChannel, redis: Redis
) -> None:
    fake.set_chat(GROUP_ID, "group")
    m = await fake.migrate(GROUP_ID, emit=False)
    out = channel.outbox()
    ref = await out.send(GROUP, OutboundMessage("The **answer**."))
    assert ref.conversation == str(m.new)
    assert fake.sent_texts(m.new) == ["The answer."]
    assert calls_to(fake, "sendMessage", GROUP_ID) == [400]
    redirect = await redis.get(keys.redirect(GROUP))
    assert redirect == str(m.new).encode()
    assert 0 < await redis.ttl(keys.redirect(GROUP)) <= keys.MOVED_TTL_SECS

    # later sends go straight there, from this process and from another one
    await out.send(GROUP, OutboundMessage("second"))
    other = TelegramOutbox(channel.bot, Pacer(redis), "123456", FAST, redis=redis)
    await other.send(GROUP, OutboundMessage("third"))
    assert calls_to(fake, "sendMessage", GROUP_ID) == [400]
    assert fake.sent_texts(m.new) == ["The answer.", "second", "third"]


async def test_edit_of_an_old_message_becomes_one_new_message_there(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    fake.set_chat(GROUP_ID, "group")
    out = channel.outbox()
    preview = await out.send(GROUP, OutboundMessage("Thinking ab", final=False))
    old_id = int(preview.message_id)
    m = await fake.migrate(GROUP_ID, emit=False)

    same = await out.edit(preview, OutboundMessage("Thinking ab", final=False))
    assert same == preview  # nothing new to show: no call at all

    await asyncio.sleep(0.4)  # a streamed edit is skipped while the group's pace is busy
    ref = await out.edit(preview, OutboundMessage("Thinking about it", final=False))
    assert calls_to(fake, "editMessageText", GROUP_ID) == [400]
    assert ref.conversation == str(m.new) and fake.sent_texts(m.new) == ["Thinking about it"]
    assert out.message_ids(ref) != out.message_ids(preview)  # the agent records the move
    assert fake.message(GROUP_ID, old_id).text == "Thinking ab"  # the old one stays

    final = await out.edit(ref, OutboundMessage("Thinking about it: **done**."))
    assert final.conversation == str(m.new) and final.message_id == ref.message_id
    assert fake.sent_texts(m.new) == ["Thinking about it"]  # edited, not sent again
    [mid] = [x for x, _ in refs.decode_parts(final.extra, final.message_id)]
    assert fake.message(m.new, mid).text == "Thinking about it: done."

    # an old ref edited once more (a prompt closed later) goes straight there too
    again = await out.edit(preview, OutboundMessage("✅ Approved"))
    assert calls_to(fake, "editMessageText", GROUP_ID) == [400]
    assert again.conversation == str(m.new) and fake.sent_texts(m.new)[-1] == "✅ Approved"


async def test_typing_follows_the_group(fake: FakeTelegram, channel: TelegramChannel) -> None:
    fake.set_chat(GROUP_ID, "group")
    m = await fake.migrate(GROUP_ID, emit=False)
    out = channel.outbox()
    await out.typing(GROUP)
    for _ in range(200):
        if calls_to(fake, "sendChatAction", m.new):
            break
        await asyncio.sleep(0.01)
    await out.turn_finished(GROUP, None)
    assert calls_to(fake, "sendChatAction", GROUP_ID) == [400]
    assert calls_to(fake, "sendChatAction", m.new)[0] == 200


async def test_both_notices_publish_one_moved_event(webhook: FakeTelegram, published) -> None:  # type: ignore[no-untyped-def]
    webhook.set_chat(GROUP_ID, "group")
    m = await webhook.migrate(GROUP_ID)  # delivers both service updates
    for update in m.updates:  # and Telegram redelivers them
        assert await webhook.deliver(update) == 200
    [event] = await published()
    assert event.kind == EventKind.MOVED
    assert event.thread == ThreadKey("telegram", "123456", str(m.new))
    assert event.moved_from == GROUP
    assert event.event_id == f"123456:migrate:{GROUP_ID}"


async def test_supergroup_notice_alone_is_enough_when_polling(
    fake: FakeTelegram,
    channel_factory,  # type: ignore[no-untyped-def]
    ingest: Ingest,
    published,  # type: ignore[no-untyped-def]
) -> None:
    channel = await channel_factory(public_url="")
    fake.set_chat(GROUP_ID, "group")
    m = await fake.migrate(GROUP_ID, emit=False)
    fake.queue_update(m.updates[1])  # the old group's notice never came
    p = Poller(channel.bot, lambda: channel.context, timeout=1, retry_secs=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(p.run(ingest, stop))
    for _ in range(300):
        if p.offset == m.updates[1]["update_id"] + 1:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    await channel.shutdown()
    [event] = await published()
    assert event.kind == EventKind.MOVED and event.moved_from == GROUP
