"""Long polling, start-up token checks and webhook administration against the fake."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from redis.asyncio import Redis
from telegram import Update

from agent_core.errors import ConfigError, StoreUnavailable
from agent_core.events import InboundEvent
from agent_core.ingest import Ingest
from agent_core.store.lease import LeaseStop
from channels.telegram import TelegramChannel, admin
from channels.telegram.polling import Poller
from tests.fakes.telegram import WEBHOOK_SECRET, FakeTelegram


async def wait_for(cond, limit: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + limit
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


def poller(channel: TelegramChannel) -> Poller:
    return Poller(channel.bot, lambda: channel.context, timeout=1, retry_secs=0.05,
                  conflict_retry_secs=0.05)  # fmt: skip


async def test_polling_publishes_in_order_and_confirms(
    fake: FakeTelegram,
    channel_factory,
    ingest: Ingest,
    published,  # type: ignore[no-untyped-def]
) -> None:
    channel = await channel_factory(public_url="")
    updates = [fake.message_update(42, f"m{i}") for i in range(3)]
    for u in updates:
        fake.queue_update(u)
    fake.queue_update(updates[1])  # a redelivery
    stop = asyncio.Event()
    p = poller(channel)
    task = asyncio.create_task(p.run(ingest, stop))
    await wait_for(lambda: p.offset == updates[-1]["update_id"] + 1)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert [e.text for e in await published()] == ["m0", "m1", "m2"]
    assert not fake.pending  # the final offset was confirmed to Telegram
    await channel.shutdown()


async def test_an_update_the_library_cannot_read_is_skipped_not_fatal(
    fake: FakeTelegram,
    channel_factory,
    ingest: Ingest,
    published,
    caplog,  # type: ignore[no-untyped-def]
) -> None:
    """One update in a form the Telegram library does not know (its whole-batch
    reading raised) killed the poller, and every restart fetched the same batch:
    Telegram silent for up to 24 h.  It is logged and skipped, the others are
    published in order and the offset moves past all of them (as the webhook
    acknowledges and drops such an update)."""
    channel = await channel_factory(public_url="")
    fake.queue_update(fake.message_update(42, "before the broken one", update_id=6))
    fake.queue_update({"update_id": 7, "message": {"chat": 5}})  # a message without its fields
    fake.queue_update(fake.message_update(42, "after the broken one", update_id=8))
    stop = asyncio.Event()
    p = poller(channel)
    with caplog.at_level(logging.WARNING, logger="channels.telegram.polling"):
        task = asyncio.create_task(p.run(ingest, stop))
        try:
            await wait_for(lambda: p.offset == 9 or task.done())
            assert not task.done(), f"the poller ended: {task.exception()!r}"
        finally:
            stop.set()
            if not task.done():
                await asyncio.wait_for(task, 5)
    assert [e.text for e in await published()] == ["before the broken one", "after the broken one"]
    assert not fake.pending  # the broken one is confirmed too: not fetched again
    [line] = [r.getMessage() for r in caplog.records if "could not be read" in r.getMessage()]
    assert "update 7" in line and "reading message" in line, line
    assert fake.token not in caplog.text and fake.token.split(":")[1] not in caplog.text
    await channel.shutdown()


async def test_offset_not_advanced_past_unpublished_update(
    fake: FakeTelegram,
    channel_factory,
    redis: Redis,
    published,  # type: ignore[no-untyped-def]
) -> None:
    channel = await channel_factory(public_url="")
    down = {"on": True}

    async def store_down(event: InboundEvent) -> str | None:
        if down["on"]:
            raise StoreUnavailable("redis went away")
        return None

    ingest = Ingest(redis, filters=[store_down])
    first = fake.message_update(42, "first")
    fake.queue_update(first)
    stop = asyncio.Event()
    p = poller(channel)
    task = asyncio.create_task(p.run(ingest, stop))
    await wait_for(lambda: len(fake.calls_of("getUpdates")) >= 1)
    await asyncio.sleep(0.3)  # several failed attempts
    assert p.offset is None
    assert await published() == []
    assert fake.pending[0]["update_id"] == first["update_id"]  # still unconfirmed
    # stop while the store is down: the update must stay unconfirmed at Telegram
    stop.set()
    await asyncio.wait_for(task, 5)
    assert [u["update_id"] for u in fake.pending] == [first["update_id"]]

    # a new poller (restart) with the store back gets it
    down["on"] = False
    stop2 = asyncio.Event()
    p2 = poller(channel)
    task2 = asyncio.create_task(p2.run(ingest, stop2))
    await wait_for(lambda: p2.offset == first["update_id"] + 1)
    stop2.set()
    await asyncio.wait_for(task2, 5)
    assert [e.text for e in await published()] == ["first"]
    await channel.shutdown()


async def test_conflict_is_one_log_line_and_polling_resumes(
    fake: FakeTelegram, channel_factory, ingest: Ingest, published,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    channel = await channel_factory(public_url="")
    fake.webhook = {"url": "https://elsewhere.example/hook", "secret_token": ""}
    stop = asyncio.Event()
    p = poller(channel)
    with caplog.at_level(logging.INFO, logger="channels.telegram.polling"):
        task = asyncio.create_task(p.run(ingest, stop))
        await wait_for(lambda: len([c for c in fake.calls if c.status == 409]) >= 4)
        conflicts = [r for r in caplog.records if "409 Conflict" in r.getMessage()]
        assert len(conflicts) == 1
        assert "delete-webhook" in conflicts[0].getMessage()
        assert not task.done()
        fake.webhook = {"url": "", "secret_token": ""}  # the operator deleted the webhook
        fake.queue_update(fake.message_update(42, "back"))
        await wait_for(lambda: p.offset is not None)
        stop.set()
        await asyncio.wait_for(task, 5)
    assert [e.text for e in await published()] == ["back"]
    assert any("resumed" in r.getMessage() for r in caplog.records)
    await channel.shutdown()


async def test_the_first_conflict_after_taking_over_is_retried_soon_not_after_30_s(
    fake: FakeTelegram, channel_factory, ingest: Ingest, published,  # type: ignore[no-untyped-def]
) -> None:  # fmt: skip
    """What the operator saw: after a gateway take-over the previous holder (resuming
    from a pause) sent one more getUpdates, the new holder's got a 409, and it waited
    the full conflict retry (30 s) before polling again: Telegram was silent for half
    a minute.  The first 409 of a run is retried after a couple of seconds."""
    channel = await channel_factory(public_url="")
    fake.webhook = {"url": "https://elsewhere.example/hook", "secret_token": ""}
    stop = asyncio.Event()
    p = Poller(channel.bot, lambda: channel.context, timeout=1, retry_secs=0.05,
               conflict_retry_secs=600, first_conflict_retry_secs=0.05)  # fmt: skip
    task = asyncio.create_task(p.run(ingest, stop))
    await wait_for(lambda: any(c.status == 409 for c in fake.calls))
    fake.webhook = {"url": "", "secret_token": ""}  # the other poller is gone
    fake.queue_update(fake.message_update(42, "after the take-over"))
    await wait_for(lambda: p.offset is not None)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert [e.text for e in await published()] == ["after the take-over"]
    await channel.shutdown()


async def test_a_poller_whose_lease_is_no_longer_valid_sends_no_getupdates(
    fake: FakeTelegram, channel_factory, ingest: Ingest,  # type: ignore[no-untyped-def]
) -> None:  # fmt: skip
    """A holder resuming from a pause longer than its lease sends no getUpdates
    (nor the confirming one on its way out): it would cut off the new holder's."""
    channel = await channel_factory(public_url="")
    held = [True]
    stop = LeaseStop(lambda: held[0])
    p = poller(channel)
    task = asyncio.create_task(p.run(ingest, stop))
    await wait_for(lambda: any(c.method == "getUpdates" for c in fake.calls))
    p.offset = 7  # something to confirm, had it still held the lease
    held[0] = False  # paused past its hold: the in-flight long poll comes back
    await asyncio.wait_for(task, 5)
    sent = len([c for c in fake.calls if c.method == "getUpdates"])
    await asyncio.sleep(0.2)
    assert len([c for c in fake.calls if c.method == "getUpdates"]) == sent == 1
    await channel.shutdown()


async def test_revoked_token_is_one_clear_line(
    fake: FakeTelegram,
    channel_factory,  # type: ignore[no-untyped-def]
) -> None:
    fake.revoked = True
    with pytest.raises(ConfigError) as exc:
        await channel_factory()
    [line] = exc.value.problems
    assert line.startswith("TELEGRAM_BOT_TOKEN: rejected by Telegram")
    assert fake.token not in line and fake.token.split(":")[1] not in line


async def test_webhook_mode_requires_a_secret(fake: FakeTelegram, channel_factory) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="TELEGRAM_WEBHOOK_SECRET"):
        await channel_factory(telegram_webhook_secret=None)


async def test_admin_set_info_delete(fake: FakeTelegram, channel: TelegramChannel) -> None:
    settings = channel.settings
    out = await admin.set_webhook(settings, "https://parley.example/")
    assert "https://parley.example/telegram/webhook" in out
    assert fake.webhook["url"] == "https://parley.example/telegram/webhook"
    assert fake.webhook["secret_token"] == WEBHOOK_SECRET
    info = await admin.webhook_info(settings)
    assert "https://parley.example/telegram/webhook" in info and "pending updates:  0" in info
    assert WEBHOOK_SECRET not in info
    await admin.delete_webhook(settings)
    assert fake.webhook["url"] == ""
    assert "(none: polling mode)" in await admin.webhook_info(settings)
    with pytest.raises(ConfigError, match="PUBLIC_URL"):
        await admin.set_webhook(settings, "http://insecure.example")


async def test_a_token_revoked_while_polling_fails_the_gateway(
    fake: FakeTelegram,
    channel_factory,
    ingest: Ingest,  # type: ignore[no-untyped-def]
) -> None:
    """Revoked after start-up: the poller raises one TELEGRAM_BOT_TOKEN line, so the
    gateway task fails and the process exits 1 to be restarted (as Discord's refused
    token does).  Before: it returned, the gateway task ended quietly and the process
    ran on with Telegram silent."""
    channel = await channel_factory(public_url="")
    stop = asyncio.Event()
    task = asyncio.create_task(poller(channel).run(ingest, stop))
    try:
        await asyncio.sleep(0.2)
        fake.revoked = True
        with pytest.raises(ConfigError) as exc:
            await asyncio.wait_for(task, 10)
    finally:
        stop.set()
        if not task.done():
            task.cancel()
        await channel.shutdown()
    [line] = exc.value.problems
    assert line.startswith("TELEGRAM_BOT_TOKEN: rejected by Telegram"), line
    assert fake.token not in line and fake.token.split(":")[1] not in line


class RenumberedAfterAQuietWeek(Poller):
    """getUpdates as Telegram answers it across its renumbering: "if there are no new
    updates for at least a week, then identifier of the next update will be chosen
    randomly instead of sequentially" (Bot API, Update).  Update 1000 came before the
    quiet week; the next one is 17, which Telegram returns to getUpdates(offset=1001)
    until an offset of the new numbering (18) confirms it.  ``repeat``: Telegram
    keeps returning 17 even then."""

    def __init__(self, channel: TelegramChannel, fake: FakeTelegram, *, repeat: bool) -> None:
        super().__init__(channel.bot, lambda: channel.context, timeout=0, retry_secs=0.05)
        self._stall = 60.0  # the pause after an answer that moved nothing: past the test
        self.before = Update.de_json(fake.message_update(42, "last week", update_id=1000), None)
        self.after = Update.de_json(fake.message_update(42, "hello again", update_id=17), None)
        self.repeat = repeat
        self.offsets: list[int | None] = []

    async def _get_updates(self) -> list[tuple[int | None, Any]]:
        self.offsets.append(self.offset)
        await asyncio.sleep(0)
        if self.offset is None:
            return [(1000, self.before)]
        if self.offset != 18 or self.repeat:
            return [(17, self.after)]
        return []  # nothing new (and no long poll: timeout 0)

    async def _confirm(self) -> None:
        pass


@pytest.mark.parametrize("repeat", [False, True], ids=["confirmed", "returned-again"])
async def test_an_update_after_telegrams_renumbering_is_published_and_the_poller_waits(
    fake: FakeTelegram,
    channel_factory,
    ingest: Ingest,
    published,  # type: ignore[no-untyped-def]
    repeat: bool,
) -> None:
    """Update 17, below the offset 1001, was skipped without moving the offset: never
    published, and getUpdates asked again at once, thousands of times a second, until
    a restart.  It is published, the offset is set from the batch (18), and an answer
    that moves nothing (the same update again, or an empty one that did not wait) is
    followed by a pause, not by the next getUpdates."""
    channel = await channel_factory(public_url="")
    p = RenumberedAfterAQuietWeek(channel, fake, repeat=repeat)
    stop = asyncio.Event()
    task = asyncio.create_task(p.run(ingest, stop))
    try:
        await wait_for(lambda: len(p.offsets) >= 3)
        await asyncio.sleep(0.3)  # pausing (stall_secs=60): no further getUpdates
        assert p.offsets == [None, 1001, 18], p.offsets
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        await channel.shutdown()
    # a repeat of 17 is de-duplicated, not answered twice
    assert [e.text for e in await published()] == ["last week", "hello again"]
    assert p.offset == 18
