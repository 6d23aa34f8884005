"""The webhook endpoint against the fake Bot API: secret, bodies, dedup, gating, topics."""

from __future__ import annotations

import httpx
from redis.asyncio import Redis
from starlette.applications import Starlette

from agent_core.errors import StoreUnavailable
from agent_core.events import EventKind, InboundEvent, OutboundMessage
from agent_core.ingest import Ingest
from channels.telegram import TelegramChannel
from tests.fakes.telegram import WEBHOOK_SECRET, FakeTelegram

SECRET = WEBHOOK_SECRET


async def post(app: Starlette, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        return await client.post("/telegram/webhook", content=body, headers=headers)


async def test_secret_missing_wrong_right(webhook: FakeTelegram, published) -> None:  # type: ignore[no-untyped-def]
    update = webhook.message_update(42, "hi")
    assert await webhook.deliver(update, secret="") == 403
    assert await webhook.deliver(update, secret="wrong") == 403
    assert await webhook.deliver(update, secret=SECRET + "x") == 403
    assert await published() == []
    assert await webhook.deliver(update) == 200
    [event] = await published()
    assert event.text == "hi" and event.event_id == f"123456:{update['update_id']}"


async def test_malformed_bodies_are_400_and_publish_nothing(
    channel: TelegramChannel,
    ingest: Ingest,
    published,  # type: ignore[no-untyped-def]
) -> None:
    app = Starlette(routes=channel.routes(ingest))
    h = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}
    assert (await post(app, b"{not json", h)).status_code == 400
    assert (await post(app, b"[1, 2]", h)).status_code == 400
    assert (await post(app, b'{"hello": "world"}', h)).status_code == 400
    assert (await post(app, b'{"update_id": "7"}', h)).status_code == 400
    assert (
        await post(app, b'{"update_id": 8, "x": "' + b"a" * 2_000_000 + b'"}', h)
    ).status_code == 413
    assert await published() == []
    # A valid update Parley does not use (a chat member change) is acknowledged, not published.
    member = (
        b'{"update_id": 9, "my_chat_member": {"chat": {"id": -5, "type": "group", "title": "g"},'
        b' "from": {"id": 1, "is_bot": false, "first_name": "a"}, "date": 1,'
        b' "old_chat_member": {"status": "left", "user": {"id": 2, "is_bot": true, "first_name": "b"}},'
        b' "new_chat_member": {"status": "member", "user": {"id": 2, "is_bot": true, "first_name": "b"}}}}'
    )
    resp = await post(app, member, h)
    assert (resp.status_code, resp.text) == (200, "ignored")
    assert await published() == []


async def test_authentic_update_the_library_cannot_read_is_acknowledged(
    webhook: FakeTelegram,
    published,  # type: ignore[no-untyped-def]
    caplog,  # type: ignore[no-untyped-def]
) -> None:
    """Signed, with an integer update_id, but ``Update.de_json`` cannot parse it: a
    4xx made Telegram redeliver it for hours; it is answered 200 and dropped."""
    import logging

    broken = {"update_id": 7, "message": {"chat": 5}}  # a message without its fields
    with caplog.at_level(logging.WARNING, logger="channels.telegram.webhook"):
        assert await webhook.deliver(broken) == 200
        assert await webhook.deliver(broken) == 200  # a redelivery too
    assert await published() == []
    assert any("update 7 could not be read" in r.getMessage() for r in caplog.records)
    # the queue moves on: the next update gets in
    update = webhook.message_update(42, "after the broken one")
    assert await webhook.deliver(update) == 200
    assert [e.text for e in await published()] == ["after the broken one"]
    # without the secret it is still refused before any parsing
    assert await webhook.deliver(broken, secret="wrong") == 403


async def test_redelivered_update_is_published_once(webhook: FakeTelegram, published) -> None:  # type: ignore[no-untyped-def]
    update = webhook.message_update(42, "once please")
    assert await webhook.deliver(update) == 200
    assert await webhook.deliver(update) == 200  # Telegram's retry
    assert await webhook.deliver(update) == 200
    assert [e.text for e in await published()] == ["once please"]


async def test_store_down_answers_503_then_retry_gets_in(
    webhook: FakeTelegram,
    channel: TelegramChannel,
    redis: Redis,
    published,  # type: ignore[no-untyped-def]
) -> None:
    calls = {"n": 0}

    async def flaky(event: InboundEvent) -> str | None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreUnavailable("redis is down")
        return None

    app = Starlette(routes=channel.routes(Ingest(redis, filters=[flaky])))
    webhook.webhook_transport = httpx.ASGITransport(app=app)
    update = webhook.message_update(42, "are you there")
    assert await webhook.deliver(update) == 503
    assert await published() == []
    assert await webhook.deliver(update) == 200  # the platform's retry is not a duplicate
    assert [e.text for e in await published()] == ["are you there"]


async def test_group_mention_gating(webhook: FakeTelegram, published) -> None:  # type: ignore[no-untyped-def]
    group = -100200
    webhook.set_chat(group, "supergroup")
    assert await webhook.deliver(webhook.message_update(group, "chatter", user_id=7)) == 200
    mention = webhook.message_update(
        group,
        "@parley_test_bot summarise",
        user_id=7,
        entities=[{"type": "mention", "offset": 0, "length": 16}],
    )
    assert await webhook.deliver(mention) == 200
    [event] = await published()
    assert (event.text, event.is_direct, event.mentions_bot) == ("summarise", False, True)


async def test_forum_topic_routing_round_trip(
    webhook: FakeTelegram,
    channel: TelegramChannel,
    published,  # type: ignore[no-untyped-def]
) -> None:
    forum = -100300
    webhook.set_chat(forum, "supergroup", is_forum=True)
    update = webhook.message_update(forum, "@parley_test_bot hello topic", thread_id=77, user_id=7)
    assert await webhook.deliver(update) == 200
    [event] = await published()
    assert event.kind == EventKind.MESSAGE
    assert (event.thread.conversation, event.thread.thread) == (str(forum), "77")
    ref = await channel.outbox().send(
        event.thread, OutboundMessage("hi there"), reply_to=event.reply_ref
    )
    [call] = webhook.calls_of("sendMessage")
    assert call.params["message_thread_id"] == "77"
    assert webhook.message(forum, int(ref.message_id)).message_thread_id == 77


async def test_polling_channel_serves_no_webhook(channel_factory, ingest: Ingest) -> None:  # type: ignore[no-untyped-def]
    ch = await channel_factory(public_url="")
    assert ch.mode == "polling" and ch.has_gateway
    assert ch.routes(ingest) == []
    await ch.shutdown()
