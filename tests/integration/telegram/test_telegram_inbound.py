"""Inbound through the webhook: a whole album in a group, anonymous admins."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agent_core.events import InboundEvent
from tests.fakes.telegram import FakeTelegram

Published = Callable[[], Awaitable[list[InboundEvent]]]


def _photo(fid: str) -> dict[str, Any]:
    size = {"file_id": fid, "file_unique_id": fid + "u", "width": 800, "height": 600}
    return {"photo": [size | {"file_size": 50_000}]}


async def test_album_addressed_in_a_group_reaches_the_agent_whole(
    webhook: FakeTelegram,
    published: Published,
) -> None:
    """Each album item is its own webhook request; the channel's parse context
    remembers the addressed album between them."""
    group = -100210
    webhook.set_chat(group, "supergroup")
    album = {"media_group_id": "13600000000000001"}
    first = webhook.message_update(
        group,
        user_id=7,
        extra=album | _photo("p1") | {"caption": "@parley_test_bot which is sharper?"},
    )
    siblings = [
        webhook.message_update(group, user_id=7, extra=album | _photo(f)) for f in ("p2", "p3")
    ]
    other = webhook.message_update(
        group, user_id=8, extra={"media_group_id": "13600000000000002"} | _photo("x1")
    )
    for update in (first, *siblings, other):
        assert await webhook.deliver(update) == 200
    events = await published()
    assert [a.ref for e in events for a in e.attachments] == ["p1", "p2", "p3"]
    assert [e.text for e in events] == ["which is sharper?", "", ""]
    assert len({e.thread for e in events}) == 1


async def test_anonymous_admin_is_answered_as_the_group(
    webhook: FakeTelegram,
    published: Published,
) -> None:
    group = -100220
    webhook.set_chat(group, "supergroup", title="Ops")
    anonymous = {"id": 1087968824, "is_bot": True, "first_name": "Group",
                 "username": "GroupAnonymousBot"}  # fmt: skip
    update = webhook.message_update(
        group,
        "@parley_test_bot status?",
        extra={"from": anonymous, "sender_chat": webhook.chat(group)},
    )
    assert await webhook.deliver(update) == 200
    [event] = await published()
    assert (event.user_id, event.user_name, event.text) == (f"chat{group}", "Ops", "status?")


async def test_album_items_reaching_another_web_process_are_accepted_too(
    webhook: FakeTelegram,
    published: Published,
    channel_factory: Callable[..., Awaitable[Any]],
    ingest: Any,
) -> None:
    """Telegram may deliver an album's items to different web processes (several
    web dynos): the addressed album is shared through Redis, not only in memory."""
    import httpx
    from starlette.applications import Starlette

    group = -100230
    webhook.set_chat(group, "supergroup")
    album = {"media_group_id": "13600000000000003"}
    first = webhook.message_update(
        group, user_id=7, extra=album | _photo("q1") | {"caption": "@parley_test_bot compare"}
    )
    sibling = webhook.message_update(group, user_id=7, extra=album | _photo("q2"))
    assert await webhook.deliver(first) == 200  # web process A
    other = await channel_factory()  # web process B: its own parse context
    try:
        webhook.webhook_transport = httpx.ASGITransport(app=Starlette(routes=other.routes(ingest)))
        assert await webhook.deliver(sibling) == 200
    finally:
        await other.shutdown()
    assert [a.ref for e in await published() for a in e.attachments] == ["q1", "q2"]
