"""Telegram's Bot API unreachable at start (a network outage, Telegram's 502s): the
process starts anyway, Slack and Discord with it, and learns the bot's name when
Telegram answers; a token Telegram rejects still stops it with one clear line.
Telegram's flood control on getMe (429) is taken the same way, never blamed on the
token."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.asyncio import Redis

from agent_core.errors import ConfigError
from agent_core.store.pacing import Pacer
from channels.base import ChannelDeps
from channels.telegram import TelegramChannel
from channels.telegram.channel import (
    TelegramRateLimited,
    TelegramUnreachable,
    check_bot,
    make_bot,
)
from tests.fakes.telegram import BOT_USERNAME, TOKEN, FakeTelegram
from tests.integration.telegram.conftest import FAST, make_settings


async def test_a_start_while_telegram_is_unreachable_goes_on_and_learns_the_name_later(
    fake: FakeTelegram, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail_next("getMe", 502, "Bad Gateway", gateway=True, count=4)
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="https://parley.example")
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    ch.identify_retry_secs = (0.05,)
    with caplog.at_level(logging.INFO):
        await ch.initialize()  # three tries fail: no exception
        await ch.publish_commands([("help", "Show help", "")])  # waits for getMe
        try:
            assert ch.context.username == ""
            assert "starting anyway" in caplog.text
            async with asyncio.timeout(10):  # one more failure, then getMe answers
                while ch.context.username != BOT_USERNAME:
                    await asyncio.sleep(0.02)
            assert ch.context.bot_id == TOKEN.split(":")[0]
            async with asyncio.timeout(10):  # then the command menu asked for meanwhile
                while not any(c.method == "setMyCommands" for c in fake.calls):
                    await asyncio.sleep(0.02)
            # not before: it waited for getMe to answer
            methods = [(c.method, c.status) for c in fake.calls]
            assert methods.index(("getMe", 200)) < methods.index(("getMyCommands", 200))
        finally:
            await ch.shutdown()
    assert TOKEN not in caplog.text


async def test_the_error_names_where_it_tried_never_the_token(fake: FakeTelegram) -> None:
    fake.fail_next("getMe", 502, "Bad Gateway", gateway=True)
    bot = make_bot(make_settings(fake))
    try:
        with pytest.raises(TelegramUnreachable) as exc:
            await check_bot(bot, attempts=1)
    finally:
        await bot.shutdown()
    [line] = exc.value.problems
    assert line.startswith(
        f"TELEGRAM_BOT_TOKEN: could not reach the Telegram Bot API at {fake.base_url}"
    )
    assert TOKEN not in line and "check this machine's network" in line


async def test_a_rejected_token_still_stops_the_start(fake: FakeTelegram, redis: Redis) -> None:
    fake.fail_next("getMe", 401, "Unauthorized")
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="https://parley.example")
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    with pytest.raises(ConfigError) as exc:
        await ch.initialize()
    assert not isinstance(exc.value, TelegramUnreachable)
    assert exc.value.problems[0].startswith("TELEGRAM_BOT_TOKEN: rejected by Telegram")
    await ch.shutdown()


async def test_flood_control_on_getme_at_start_is_waited_out_not_blamed_on_the_token(
    fake: FakeTelegram, redis: Redis
) -> None:
    """A 429 on getMe (many processes restarting at once) stopped the whole process
    with "TELEGRAM_BOT_TOKEN: getMe failed: Flood control exceeded", Slack, Discord
    and the web chat with it.  A short wait is waited out and getMe asked again."""
    fake.fail_next("getMe", 429, retry_after=1)
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="https://parley.example")
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    try:
        await ch.initialize()
        assert ch.context.username == BOT_USERNAME and ch.unreachable == ""
        assert [c.status for c in fake.calls if c.method == "getMe"] == [429, 200]
    finally:
        await ch.shutdown()


async def test_a_long_flood_control_wait_on_getme_starts_anyway_and_asks_later(
    fake: FakeTelegram, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Telegram asks for a longer wait than start-up should take: the channel starts
    (as when Telegram is unreachable) and asks getMe again once the wait is over."""
    fake.fail_next("getMe", 429, retry_after=30)
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="https://parley.example")
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    with caplog.at_level(logging.INFO):
        try:
            await ch.initialize()  # no exception
            assert ch.unreachable.startswith(
                "TELEGRAM_BOT_TOKEN: rate limited by Telegram (429 Too Many Requests on getMe)"
            ), ch.unreachable
            assert "retry in 30 s" in ch.unreachable and "getMe failed" not in ch.unreachable
            assert "retry in 30 s" in ch.unreachable_fix
            assert "starting anyway, asking again in 30 s" in caplog.text
            assert [c.status for c in fake.calls if c.method == "getMe"] == [429]  # not hammered
        finally:
            await ch.shutdown()
    assert TOKEN not in caplog.text


async def test_check_bot_reports_flood_control_as_a_wait(fake: FakeTelegram) -> None:
    """`parley release` / `parley telegram ...` (one getMe): the line says to retry
    later, not that the token failed; a second 429 after a short wait is not waited
    out again."""
    bot = make_bot(make_settings(fake))
    try:
        fake.fail_next("getMe", 429, retry_after=1, count=2)
        with pytest.raises(TelegramRateLimited) as exc:
            await check_bot(bot, attempts=1)
    finally:
        await bot.shutdown()
    [line] = exc.value.problems
    detail, _, fix = line.partition("; ")
    assert detail == "TELEGRAM_BOT_TOKEN: rate limited by Telegram (429 Too Many Requests on getMe)"
    assert fix.startswith("retry in 1 s"), fix
    assert exc.value.retry_after == 1
    assert [c.status for c in fake.calls if c.method == "getMe"] == [429, 429]


async def test_polling_waits_for_getme_so_a_group_mention_is_not_dropped(
    fake: FakeTelegram,
    redis: Redis,
    published,  # type: ignore[no-untyped-def]
) -> None:
    """Restarted into getMe flood control, the poller ran with the bot's @name
    unknown: "@bot ..." said in a group while Parley was down was taken for a message
    to others, dropped, and confirmed to Telegram.  getUpdates now waits for getMe;
    the mention is then published, addressed, with the mention removed."""
    from agent_core.ingest import Ingest

    fake.queue_update(fake.message_update(-100123, f"@{BOT_USERNAME} what is the weather?"))
    fake.queue_update(fake.message_update(42, "and in a DM"))
    # twice at start (the short wait is waited out once), once more when asked later
    fake.fail_next("getMe", 429, retry_after=0.2, count=3)
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="")  # polling
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    ch.identify_retry_secs = (0.05,)
    await ch.initialize()
    assert ch.context.username == ""
    stop = asyncio.Event()
    task = asyncio.create_task(ch.run_gateway(Ingest(redis), stop))
    try:
        async with asyncio.timeout(10):
            while len(await published()) < 2:
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await ch.shutdown()
    methods = [(c.method, c.status) for c in fake.calls]
    assert methods.count(("getMe", 429)) == 3
    # not one getUpdates before getMe answered
    assert methods.index(("getMe", 200)) < methods.index(("getUpdates", 200)), methods
    group, dm = await published()
    assert group.text == "what is the weather?" and group.mentions_bot
    assert dm.text == "and in a DM"


async def test_polling_that_is_stopped_while_getme_waits_sends_no_getupdates(
    fake: FakeTelegram, redis: Redis
) -> None:
    fake.fail_next("getMe", 429, retry_after=30)
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="")
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    await ch.initialize()
    stop = asyncio.Event()
    task = asyncio.create_task(ch.run_gateway(None, stop))  # type: ignore[arg-type]
    try:
        await asyncio.sleep(0.1)
        assert not task.done()
        stop.set()
        await asyncio.wait_for(task, 5)
    finally:
        await ch.shutdown()
    assert not any(c.method == "getUpdates" for c in fake.calls)


async def test_a_webhook_asks_telegram_to_resend_a_group_mention_until_getme_answers(
    fake: FakeTelegram,
    redis: Redis,
    published,  # type: ignore[no-untyped-def]
) -> None:
    """Same cause in webhook mode: a web process restarted into getMe flood control
    answered 200 ("ignored") to a group "@bot ..." it could not recognise, and
    Telegram never sent it again.  Until getMe answers, a group message that may name
    the bot is answered 503 (Telegram redelivers it); private chats, and group
    messages that cannot name it, are handled as ever."""
    import httpx
    from starlette.applications import Starlette

    from agent_core.ingest import Ingest
    from tests.integration.telegram.conftest import SECRET

    fake.fail_next("getMe", 429, retry_after=30)  # starts without it, asks again in 30 s
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="https://parley.example")
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    await ch.initialize()
    try:
        fake.webhook_transport = httpx.ASGITransport(app=Starlette(routes=ch.routes(Ingest(redis))))
        fake.webhook = {"url": "http://127.0.0.1:9/telegram/webhook", "secret_token": SECRET}
        mention = fake.message_update(-100123, f"@{BOT_USERNAME} hi there")
        command = fake.message_update(-100123, f"/new@{BOT_USERNAME}")
        chatter = fake.message_update(-100123, "lunch anyone?")  # cannot name the bot
        dm = fake.message_update(42, "hello")
        assert ch.context.username == ""
        assert [await fake.deliver(u) for u in (mention, command, chatter, dm)] == [
            503,
            503,
            200,
            200,
        ]
        assert [e.text for e in await published()] == ["hello"]
        async with asyncio.timeout(10):  # getMe answers after the 30 s wait (cut short)
            ch._identify.cancel()  # type: ignore[union-attr]
            ch._identify = asyncio.create_task(ch._identify_later(0.0))
            while ch.context.username != BOT_USERNAME:
                await asyncio.sleep(0.02)
        # Telegram's redelivery
        assert [await fake.deliver(u) for u in (mention, command)] == [200, 200]
    finally:
        await ch.shutdown()
    texts = [(e.text, e.mentions_bot) for e in await published()]
    assert texts == [("hello", False), ("hi there", True), ("/new", True)], texts


async def _start_once(fake: FakeTelegram, redis: Redis) -> None:
    """A start that getMe answered: the bot's @name is stored for the next one."""
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="https://parley.example")
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    await ch.initialize()
    await ch.shutdown()


async def test_a_webhook_restarted_into_getme_trouble_uses_the_stored_name(
    fake: FakeTelegram,
    redis: Redis,
    published,  # type: ignore[no-untyped-def]
) -> None:
    """A 503'd group message holds back that group's later updates too (Telegram
    delivers one chat's updates in order), for as long as getMe is refused.  The
    @name getMe gave on an earlier start (kept in Redis) stands in until it answers:
    a group mention is handled at once."""
    import httpx
    from starlette.applications import Starlette

    from agent_core.ingest import Ingest
    from agent_core.store import keys
    from tests.integration.telegram.conftest import SECRET

    await _start_once(fake, redis)
    bot_id = TOKEN.split(":")[0]
    assert await redis.get(keys.bot_identity("telegram", bot_id))
    fake.fail_next("getMe", 429, retry_after=30)  # restarted into flood control
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="https://parley.example")
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    await ch.initialize()
    try:
        assert ch.unreachable and ch.context.username == BOT_USERNAME
        fake.webhook_transport = httpx.ASGITransport(app=Starlette(routes=ch.routes(Ingest(redis))))
        fake.webhook = {"url": "http://127.0.0.1:9/telegram/webhook", "secret_token": SECRET}
        mention = fake.message_update(-100123, f"@{BOT_USERNAME} hi there")
        command = fake.message_update(-100123, f"/new@{BOT_USERNAME}")
        other = fake.message_update(-100123, "@someone_else lunch?")
        assert [await fake.deliver(u) for u in (mention, command, other)] == [200, 200, 200]
    finally:
        await ch.shutdown()
    texts = [(e.text, e.mentions_bot) for e in await published()]
    assert texts == [("hi there", True), ("/new", True)], texts


async def test_polling_restarted_into_getme_trouble_uses_the_stored_name(
    fake: FakeTelegram,
    redis: Redis,
    published,  # type: ignore[no-untyped-def]
) -> None:
    """Polling no longer waits for getMe when an earlier start stored the @name."""
    from agent_core.ingest import Ingest

    await _start_once(fake, redis)
    fake.queue_update(fake.message_update(-100123, f"@{BOT_USERNAME} what is the weather?"))
    fake.fail_next("getMe", 429, retry_after=30)
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="")  # polling
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    await ch.initialize()
    stop = asyncio.Event()
    task = asyncio.create_task(ch.run_gateway(Ingest(redis), stop))
    try:
        async with asyncio.timeout(10):
            while not await published():
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await ch.shutdown()
    # getMe never answered on this start
    assert [c.status for c in fake.calls if c.method == "getMe"][-1:] == [429]
    [group] = await published()
    assert group.text == "what is the weather?" and group.mentions_bot


async def test_a_renamed_bot_replaces_the_stored_name_once_getme_answers(
    fake: FakeTelegram, redis: Redis
) -> None:
    import orjson

    from agent_core.store import keys

    bot_id = TOKEN.split(":")[0]
    key = keys.bot_identity("telegram", bot_id)
    await redis.set(key, orjson.dumps({"id": bot_id, "username": "old_name_bot"}))
    fake.fail_next("getMe", 429, retry_after=30)
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis), public_url="https://parley.example")
    ch = TelegramChannel(make_settings(fake), deps, limits=FAST)
    await ch.initialize()
    try:
        assert ch.context.username == "old_name_bot"
        ch._identify.cancel()  # type: ignore[union-attr]
        ch._identify = asyncio.create_task(ch._identify_later(0.0))  # the wait, cut short
        async with asyncio.timeout(10):
            while ch.context.username != BOT_USERNAME:
                await asyncio.sleep(0.02)
    finally:
        await ch.shutdown()
    assert orjson.loads(await redis.get(key)) == {"id": bot_id, "username": BOT_USERNAME}
