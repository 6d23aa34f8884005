"""The real discord.py gateway client against the fake: routing into Ingest."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import discord
import pytest
from discord_harness import Gateway, ready_gateway, wait_client_ready
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_core.errors import ConfigError, StoreUnavailable
from agent_core.events import OutboundMessage
from agent_core.store.lease import LeaseStop
from channels.discord import channel as discord_channel
from channels.discord import gateway as gateway_mod
from channels.discord.channel import BAD_TOKEN
from channels.discord.gateway import GatewayClient
from channels.discord.state import DiscordState
from tests.fakes.discord import ALICE, CHANNEL_ID, DM_CHANNEL_ID, GUILD_ID, FakeDiscord


async def test_dm_is_published(gateway: Gateway, fake_discord: FakeDiscord) -> None:
    msg = await fake_discord.user_message(DM_CHANNEL_ID, "hello there")
    (event,) = await gateway.wait_published(1)
    assert event.event_id == msg["id"]
    assert event.text == "hello there"
    assert event.is_direct
    assert (event.thread.tenant, event.thread.conversation, event.thread.thread) == (
        "dm",
        DM_CHANNEL_ID,
        "",
    )
    assert fake_discord.identifies[0]["intents"] & (1 << 15)  # message content requested
    assert fake_discord.transports == ["zlib-stream"]  # what discord.py asks for
    assert fake_discord.heartbeats >= 1


async def test_guild_messages_need_a_mention_or_a_reply(
    gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    await fake_discord.user_message(CHANNEL_ID, "just chatting")  # not addressed
    mention = await fake_discord.user_message(CHANNEL_ID, "what time is it?", mention=True)
    (event,) = await gateway.wait_published(1)
    assert event.event_id == mention["id"]
    assert event.text == "what time is it?"  # the mention itself is stripped
    assert event.mentions_bot and not event.is_direct
    assert (event.thread.tenant, event.thread.conversation, event.thread.thread) == (
        GUILD_ID,
        CHANNEL_ID,
        "",
    )
    # a reply to one of the bot's messages counts as addressing it
    bot_msg = await gateway.channel.outbox().send(event.thread, OutboundMessage("noon"))
    reply = await fake_discord.user_message(CHANNEL_ID, "thanks", reply_to=bot_msg.message_id)
    events = await gateway.wait_published(2)
    assert events[1].event_id == reply["id"]
    await asyncio.sleep(0.1)
    assert len(await gateway.published()) == 2  # "just chatting" and the bot's own message ignored


async def test_group_reply_all_takes_every_message(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    gw = make_gateway(group_reply="all")
    await gw.start()
    try:
        await wait_client_ready(gw)
        await fake_discord.user_message(CHANNEL_ID, "no mention here")
        (event,) = await gw.wait_published(1)
        assert event.text == "no mention here" and not event.mentions_bot
    finally:
        await gw.halt()


async def test_attachments_are_references(gateway: Gateway, fake_discord: FakeDiscord) -> None:
    att = {
        "id": "9",
        "filename": "cat.png",
        "content_type": "image/png",
        "size": 1234,
        "url": "https://cdn.example/cat.png",
    }
    await fake_discord.user_message(DM_CHANNEL_ID, "", attachments=[att])
    (event,) = await gateway.wait_published(1)
    (a,) = event.attachments
    assert (a.kind, a.name, a.mime, a.size, a.ref) == (
        "image",
        "cat.png",
        "image/png",
        1234,
        "https://cdn.example/cat.png",
    )


async def test_thread_started_by_the_bot_needs_no_mention(
    gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    thread = fake_discord.add_channel(
        "1600000000000000001", guild_id=GUILD_ID, parent_id=CHANNEL_ID
    )
    await fake_discord.dispatch("THREAD_CREATE", {**thread, "newly_created": True}, GUILD_ID)
    foreign = fake_discord.add_channel(
        "1600000000000000002", guild_id=GUILD_ID, parent_id=CHANNEL_ID, owner_id=ALICE["id"]
    )
    await fake_discord.dispatch("THREAD_CREATE", {**foreign, "newly_created": True}, GUILD_ID)
    await fake_discord.user_message(foreign["id"], "people talking")  # ignored
    msg = await fake_discord.user_message(thread["id"], "follow-up")
    (event,) = await gateway.wait_published(1)
    assert event.event_id == msg["id"]
    assert (event.thread.conversation, event.thread.thread) == (CHANNEL_ID, thread["id"])
    # once mentioned in someone else's thread, the bot follows it there too
    await fake_discord.user_message(foreign["id"], "hey bot", mention=True)
    await fake_discord.user_message(foreign["id"], "and more")
    events = await gateway.wait_published(3)
    assert [e.text for e in events[1:]] == ["hey bot", "and more"]
    assert {e.thread.thread for e in events[1:]} == {foreign["id"]}


async def test_auto_thread_opens_a_thread_and_continues_there(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    gw = make_gateway(discord_auto_thread=True)
    await gw.start()
    try:
        await wait_client_ready(gw)
        first = await fake_discord.user_message(CHANNEL_ID, "plan my trip", mention=True)
        (call,) = await fake_discord.wait_call("POST", rf"/messages/{first['id']}/threads")
        assert call.json["name"] == "plan my trip"
        (event,) = await gw.wait_published(1)
        assert (event.thread.conversation, event.thread.thread) == (CHANNEL_ID, first["id"])
        # the next message in the new thread needs no mention
        await fake_discord.user_message(first["id"], "in June")
        events = await gw.wait_published(2)
        assert events[1].thread == event.thread and events[1].text == "in June"
        # the answer goes into the thread
        await gw.channel.outbox().send(event.thread, OutboundMessage("Sure."))
        await fake_discord.wait_call("POST", rf"/channels/{first['id']}/messages$")
    finally:
        await gw.halt()


async def test_catch_up_after_a_non_resumable_disconnect(
    gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    await fake_discord.user_message(DM_CHANNEL_ID, "first")
    await fake_discord.user_message(CHANNEL_ID, "in the channel", mention=True)
    await gateway.wait_published(2)
    client = gateway.channel.client
    assert client is not None
    catchups = client.catchups
    # said while the bot is disconnected: stored, never dispatched
    missed_dm = await fake_discord.user_message(
        DM_CHANNEL_ID, "while you were away", dispatch=False
    )
    await fake_discord.user_message(CHANNEL_ID, "chatter", dispatch=False)  # not addressed
    missed_mention = await fake_discord.user_message(
        CHANNEL_ID, "did you see this?", mention=True, dispatch=False
    )
    await fake_discord.invalidate_sessions()
    await fake_discord.wait_ready(2)
    await fake_discord.wait(lambda: client.catchups > catchups, 10, "catch-up")
    events = await gateway.wait_published(4)
    # each conversation is caught up in its own order; no order between two
    # conversations is promised (a loaded box reordered these two once)
    assert sorted(e.event_id for e in events[2:]) == sorted([missed_dm["id"], missed_mention["id"]])
    # catching up twice publishes nothing twice (dedup on message id)
    await client.catch_up(0)
    await asyncio.sleep(0.2)
    assert len(await gateway.published()) == 4


async def test_resume_replays_without_catch_up(gateway: Gateway, fake_discord: FakeDiscord) -> None:
    client = gateway.channel.client
    assert client is not None
    await fake_discord.request_reconnect()
    await fake_discord.wait(lambda: len(fake_discord.resumes) == 1, 10, "RESUME")
    msg = await fake_discord.user_message(DM_CHANNEL_ID, "after resume")
    (event,) = await gateway.wait_published(1)
    assert event.event_id == msg["id"]
    assert len(fake_discord.identifies) == 1  # resumed, not re-identified


async def test_without_message_content_intent_dms_and_mentions_still_work(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord, caplog: Any
) -> None:
    fake_discord.message_content = False
    gw = make_gateway(group_reply="all")  # where plain text would otherwise count
    with caplog.at_level(logging.WARNING):
        await gw.start()
        try:
            await wait_client_ready(gw)
            assert not fake_discord.identifies[0]["intents"] & (1 << 15)
            await fake_discord.user_message(CHANNEL_ID, "hello", mention=True)
            await fake_discord.user_message(DM_CHANNEL_ID, "hi")
            events = await gw.wait_published(2)
            assert [e.text for e in events] == ["hello", "hi"]
            # an approval prompt in a server channel must not say typing "yes" works
            assert gw.channel.outbox().group_text_reaches is False
        finally:
            await gw.halt()
    lines = [r.getMessage() for r in caplog.records if "Message Content intent" in r.getMessage()]
    assert len(lines) == 1


async def test_disallowed_intent_close_falls_back(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord, caplog: Any
) -> None:
    # The portal flag looked enabled, but the gateway refuses the intent (close 4014).
    fake_discord.message_content = False
    gw = make_gateway()
    gw.channel.message_content = True
    with caplog.at_level(logging.WARNING):
        gw.task = asyncio.create_task(gw.channel.run_gateway(gw.ingest, gw.stop))
        try:
            await fake_discord.wait_ready(1)
            assert not fake_discord.identifies[0]["intents"] & (1 << 15)
            await fake_discord.user_message(DM_CHANNEL_ID, "still here")
            (event,) = await gw.wait_published(1)
            assert event.text == "still here"
        finally:
            await gw.halt()
    assert any("Message Content intent" in r.getMessage() for r in caplog.records)


async def test_bad_token_is_one_clear_config_error(
    make_gateway: Callable[..., Gateway],
) -> None:
    gw = make_gateway(discord_bot_token="wrong-token")
    with pytest.raises(ConfigError) as err:
        await gw.channel.initialize()
    assert err.value.problems == [BAD_TOKEN]
    assert "wrong-token" not in str(err.value)


async def test_two_shards_in_one_process(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    gw = make_gateway(discord_shards="2")
    await gw.start()
    try:
        await fake_discord.wait_ready(2)
        assert sorted(i["shard"] for i in fake_discord.identifies) == [[0, 2], [1, 2]]
        await fake_discord.user_message(CHANNEL_ID, "guild", mention=True)
        await fake_discord.user_message(DM_CHANNEL_ID, "dm")
        events = await gw.wait_published(2)
        assert sorted(e.text for e in events) == ["dm", "guild"]
    finally:
        await gw.halt()


# --- passing failures while connecting are retried, not fatal -------------------------


async def test_failed_gateway_bot_request_is_retried_not_fatal(
    make_gateway: Callable[..., Gateway],
    fake_discord: FakeDiscord,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With DISCORD_SHARDS=auto discord.py asks GET /gateway/bot and turns any error
    there into GatewayNotFound; one 503 must not stop the whole process."""
    monkeypatch.setattr(discord_channel, "RECONNECT_DELAY", 0.1)
    fake_discord.fail("GET", r"/gateway/bot$", 503)
    gw = make_gateway()
    await gw.start()
    try:
        await wait_client_ready(gw)
        assert gw.task is not None and not gw.task.done()
        assert [c.status for c in fake_discord.calls_to("GET", r"/gateway/bot$")][:2] == [503, 200]
    finally:
        await gw.halt()


async def test_redis_down_while_loading_the_state_is_retried_not_fatal(
    make_gateway: Callable[..., Gateway],
    fake_discord: FakeDiscord,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(discord_channel, "RECONNECT_DELAY", 0.1)
    load = DiscordState.load
    failures = [RedisConnectionError("Redis is restarting")]

    async def flaky(self: DiscordState) -> None:
        if failures:
            raise failures.pop()
        await load(self)

    monkeypatch.setattr(DiscordState, "load", flaky)
    gw = make_gateway()
    await gw.start()
    try:
        await wait_client_ready(gw)
        assert not failures and gw.task is not None and not gw.task.done()
    finally:
        await gw.halt()


async def test_long_429_on_gateway_login_is_retried_not_fatal(
    make_gateway: Callable[..., Gateway],
    fake_discord: FakeDiscord,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 429 on login longer than DISCORD_MAX_RETRY_WAIT is discord.RateLimited (not
    an HTTPException): waited out like any passing failure."""
    monkeypatch.setattr(discord_channel, "RECONNECT_DELAY", 0.1)
    login = GatewayClient.login
    failures = [discord.RateLimited(120.0)]

    async def limited(self: GatewayClient, token: str) -> None:
        if failures:  # discord.py's login asks GET /users/@me through its HTTPClient

            async def refused(token: str) -> Any:
                raise failures.pop()

            monkeypatch.setattr(self.http, "static_login", refused)
        await login(self, token)

    monkeypatch.setattr(GatewayClient, "login", limited)
    gw = make_gateway()
    await gw.start()
    try:
        await wait_client_ready(gw)
        assert not failures and gw.task is not None and not gw.task.done()
    finally:
        await gw.halt()


# --- catch-up of a busy channel ---------------------------------------------------------


@pytest.mark.parametrize(("cap", "chatter"), [(5, 8), (150, 160)])
async def test_catch_up_of_a_busy_channel_reads_the_newest_messages_and_says_so(
    make_gateway: Callable[..., Gateway],
    fake_discord: FakeDiscord,
    caplog: pytest.LogCaptureFixture,
    cap: int,
    chatter: int,
) -> None:
    """More was said during the outage than DISCORD_CATCHUP_MAX_MESSAGES: the newest
    messages are re-read (the recent mention is answered), and the older ones left
    out are counted in a log line, not skipped in silence."""
    async with ready_gateway(make_gateway, discord_catchup_max_messages=cap) as gw:
        await fake_discord.user_message(CHANNEL_ID, "hello", mention=True)
        await gw.wait_published(1)
        client = gw.channel.client
        assert client is not None
        catchups = client.catchups
        for i in range(chatter):
            await fake_discord.user_message(CHANNEL_ID, f"chatter {i}", dispatch=False)
        missed = await fake_discord.user_message(
            CHANNEL_ID, "are you there?", mention=True, dispatch=False
        )
        with caplog.at_level(logging.WARNING, logger="channels.discord.gateway"):
            await fake_discord.invalidate_sessions()
            await fake_discord.wait(lambda: client.catchups > catchups, 10, "catch-up")
        events = await gw.wait_published(2)
        assert events[1].event_id == missed["id"]
        skipped = chatter + 1 - cap
        assert any(
            f"{CHANNEL_ID} had more than {cap} new messages" in r.getMessage()
            and f", {skipped} older one(s) skipped" in r.getMessage()
            for r in caplog.records
        ), [r.getMessage() for r in caplog.records]


async def test_a_message_said_while_away_is_caught_up_when_the_person_writes_again(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    """A question asked while the bot was disconnected was never answered when the
    person wrote again as the bot came back (within the guild-ready wait): the live
    message moved the conversation's last-seen mark past the missed one before the
    catch-up read it."""
    gw = make_gateway(discord_guild_ready_timeout=1.5)  # catch-up starts 1.5 s after READY
    await gw.start()
    try:
        await fake_discord.wait_ready()
        await wait_client_ready(gw)
        await fake_discord.user_message(DM_CHANNEL_ID, "first")
        await gw.wait_published(1)
        client = gw.channel.client
        assert client is not None
        catchups = client.catchups
        missed = await fake_discord.user_message(
            DM_CHANNEL_ID, "question asked while you were away", dispatch=False
        )
        await fake_discord.invalidate_sessions()
        await fake_discord.wait_ready(2)
        nudge = await fake_discord.user_message(DM_CHANNEL_ID, "hello??")
        await fake_discord.wait(lambda: client.catchups > catchups, 10, "catch-up")
        ids = [e.event_id for e in await gw.wait_published(3)]
        assert nudge["id"] in ids and missed["id"] in ids
    finally:
        await gw.halt()


async def _start_under_lease(gw: Gateway, held: list[bool]) -> None:
    """Start ``gw`` with a lease that is ours while ``held[0]`` is true."""
    await gw.channel.initialize()
    gw.stop = LeaseStop(lambda: held[0])
    gw.task = asyncio.create_task(gw.channel.run_gateway(gw.ingest, gw.stop))


async def test_a_message_after_the_lease_is_gone_is_not_submitted(
    make_gateway: Callable[..., Gateway],
    fake_discord: FakeDiscord,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the operator saw: a gateway process resuming from a pause longer than its
    lease (another process had connected to Discord in its place) went on publishing
    the messages its old session still received, beside the new holder.  Once the
    lease is not surely ours a message is dropped: the new holder's session has it."""
    gw = make_gateway()
    held = [True]
    await _start_under_lease(gw, held)
    try:
        await wait_client_ready(gw)
        await fake_discord.user_message(DM_CHANNEL_ID, "held")
        await gw.wait_published(1)
        held[0] = False  # resumed from a pause: the lease is another process's now
        with caplog.at_level(logging.INFO, logger="channels.discord.gateway"):
            late = await fake_discord.user_message(DM_CHANNEL_ID, "not ours")
            for _ in range(250):
                if any(late["id"] in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.02)
        assert [e.text for e in await gw.published()] == ["held"]
        assert any("no longer ours" in r.getMessage() for r in caplog.records)
    finally:
        await gw.halt()


def _prompt(fake_discord: FakeDiscord, channel_id: str, payload: str) -> dict[str, Any]:
    """An approval prompt of the bot in ``channel_id`` with one ``parley:`` button."""
    button = {"type": 2, "style": 3, "label": "Approve", "custom_id": f"parley:{payload}"}
    msg = fake_discord._message(
        channel_id,
        fake_discord.bot_user,
        "Run it?",
        components=[{"type": 1, "components": [button]}],
    )
    fake_discord.messages.setdefault(channel_id, {})[msg["id"]] = msg
    return msg


async def test_a_press_names_the_presser_as_the_server_shows_them(
    gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    """Messages and slash commands carry the server nickname (the name Discord
    shows); a press does too, so the prompt reads "Approved by Alice (Ops)"."""
    prompt = _prompt(fake_discord, CHANNEL_ID, "tok123")
    await fake_discord.press(prompt["id"], "parley:tok123", nick="Alice (Ops)")
    (event,) = await gateway.wait_published(1)
    assert event.user_name == "Alice (Ops)"


async def test_a_press_in_a_thread_missing_from_the_cache_keeps_the_threads_conversation(
    gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    """discord.py drops archived threads from its cache.  A prompt in such a thread
    (with GROUP_REPLY=all not in Parley's followed set either) is pressed: the
    interaction's channel says it is a thread under its parent, so the press lands
    in conversation <parent>/<thread>, where the approval is, as a slash command does."""
    thread_id = "1300000000000000099"
    fake_discord.add_channel(
        thread_id, guild_id=GUILD_ID, name="old", parent_id=CHANNEL_ID, owner_id=ALICE["id"]
    )  # known to Discord, never sent to the gateway: not in discord.py's cache
    prompt = _prompt(fake_discord, thread_id, "tok456")
    await fake_discord.press(prompt["id"], "parley:tok456")
    (event,) = await gateway.wait_published(1)
    assert (event.thread.conversation, event.thread.thread) == (CHANNEL_ID, thread_id)


# --- a stop and a Redis outage lose no message -----------------------------------------


def _refuse_submits_while_down(gw: Gateway) -> tuple[list[bool], list[str]]:
    """Make ``gw``'s submits fail as Redis does while ``down[0]`` is true; the ids
    refused are collected in ``refused``.  Returns ``(down, refused)``."""
    real_submit = gw.ingest.submit
    down = [False]
    refused: list[str] = []

    async def submit(event: Any) -> Any:
        if down[0]:
            refused.append(event.event_id)
            raise StoreUnavailable("cannot publish event: ConnectionError")
        return await real_submit(event)

    gw.ingest.submit = submit  # type: ignore[method-assign]
    return down, refused


async def _start_and_queue_three(gw: Gateway, fake_discord: FakeDiscord) -> list[dict[str, Any]]:
    """Start ``gw``, send it three DMs and wait until two of them are queued behind
    the first (whose submit is held up).  Returns the messages sent."""
    await gw.start()
    await wait_client_ready(gw)
    client = gw.channel.client
    assert client is not None
    sent = [await fake_discord.user_message(DM_CHANNEL_ID, f"hello {i}") for i in range(3)]
    await fake_discord.wait(lambda: client._queue.qsize() == 2, 5, "two messages queued")
    return sent


async def _next_process_publishes(make_gateway: Callable[..., Gateway], count: int) -> list[str]:
    """A next gateway process takes over: the ids of the first ``count`` events it
    publishes (its catch-up)."""
    gw2 = make_gateway()
    await gw2.start()
    try:
        await wait_client_ready(gw2)
        return [e.event_id for e in await gw2.wait_published(count)]
    finally:
        await gw2.halt()


async def test_messages_received_before_a_stop_are_published_before_the_connection_closes(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    """A deploy's SIGTERM closed the connection at once: the messages this session
    had received but not yet handled (queued behind a slow Redis) were neither
    published nor marked, Discord never sent them again (the next process
    IDENTIFYs) and the next catch-up did not know the conversation (a new DM).
    They are now handled before the connection closes."""
    gw = make_gateway()
    real_submit = gw.ingest.submit
    redis_answers = asyncio.Event()

    async def slow_submit(event: Any) -> Any:
        await redis_answers.wait()  # a slow Redis: the messages wait in the queue
        return await real_submit(event)

    gw.ingest.submit = slow_submit  # type: ignore[method-assign]
    sent = await _start_and_queue_three(gw, fake_discord)
    halting = asyncio.create_task(gw.halt())  # the deploy's SIGTERM
    await fake_discord.wait(gw.stop.is_set, 5, "stop")
    redis_answers.set()
    await halting
    assert [e.event_id for e in await gw.published()] == [m["id"] for m in sent]


async def test_messages_left_unhandled_at_a_stop_are_caught_up_by_the_next_process(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord, redis: Any
) -> None:
    """What the stop cannot handle in time (Redis too slow) is not marked seen, and
    its conversation, a DM never seen before, is marked for the next catch-up."""
    gw = make_gateway()

    async def stuck_submit(event: Any) -> Any:
        await asyncio.Event().wait()  # Redis never answers this process again

    gw.ingest.submit = stuck_submit  # type: ignore[method-assign]
    sent = await _start_and_queue_three(gw, fake_discord)
    await gw.halt()
    assert await gw.published() == []
    assert await redis.hget("parley:discord:last", DM_CHANNEL_ID) is not None
    # the next gateway process takes over and catches up
    assert await _next_process_publishes(make_gateway, 3) == [m["id"] for m in sent]


async def test_a_message_redis_refuses_for_long_is_published_in_order_once_it_is_back(
    make_gateway: Callable[..., Gateway],
    fake_discord: FakeDiscord,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gateway gave a message up after 30 s of Redis failures (a failover, a
    maintenance) and the conversation's next message moved the last seen mark past
    it: no catch-up ever read it again.  It is now retried for as long as the lease
    is ours, and the next message waits behind it."""
    # the limit the gateway had until 2026-11-25 (30 s), shortened: on that code
    # this outage outlasts it; now there is none
    monkeypatch.setattr(gateway_mod, "SUBMIT_RETRY_SECS", 0.3, raising=False)
    monkeypatch.setattr(gateway_mod, "SUBMIT_MAX_DELAY", 0.2, raising=False)
    gw = make_gateway()
    down, refused = _refuse_submits_while_down(gw)
    await gw.start()
    try:
        await wait_client_ready(gw)
        first = await fake_discord.user_message(DM_CHANNEL_ID, "first")
        await gw.wait_published(1)
        down[0] = True  # Redis fails over
        lost = await fake_discord.user_message(DM_CHANNEL_ID, "asked during the outage")
        later = await fake_discord.user_message(DM_CHANNEL_ID, "hello?")
        await asyncio.sleep(1.0)  # the outage lasts
        assert refused and set(refused) == {lost["id"]}  # the later one waits behind it
        down[0] = False  # Redis is back
        events = await gw.wait_published(3)
        assert [e.event_id for e in events] == [first["id"], lost["id"], later["id"]]
    finally:
        await gw.halt()


async def test_a_message_redis_refuses_until_the_lease_is_gone_is_left_to_the_catch_up(
    make_gateway: Callable[..., Gateway],
    fake_discord: FakeDiscord,
    redis: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Retrying has no time limit now, so it ends with the lease: Redis down long
    enough for the lease to lapse, the message is given up by this process (before,
    it was retried for 30 s whatever the lease, and could be published beside the
    new holder), its conversation's mark not moved past it, and the next holder's
    catch-up reads it."""
    gw = make_gateway()
    held = [True]
    down, refused = _refuse_submits_while_down(gw)
    await _start_under_lease(gw, held)
    try:
        await wait_client_ready(gw)
        first = await fake_discord.user_message(DM_CHANNEL_ID, "first")
        await gw.wait_published(1)
        down[0] = True
        lost = await fake_discord.user_message(DM_CHANNEL_ID, "asked during the outage")
        await fake_discord.wait(lambda: len(refused) >= 2, 10, "Redis refusing")
        with caplog.at_level(logging.WARNING, logger="channels.discord.gateway"):
            held[0] = False  # the lease lapses (Redis could not renew it either)
            await fake_discord.wait(
                lambda: any(
                    lost["id"] in r.getMessage() and "next holder" in r.getMessage()
                    for r in caplog.records
                ),
                5,
                "the message left to the next holder",
            )
        gw.stop.set()  # the lease keeper notices: the gateway stops
    finally:
        await gw.halt()
    down[0] = False
    assert [e.event_id for e in await gw.published()] == [first["id"]]
    assert await redis.hget("parley:discord:last", DM_CHANNEL_ID) == first["id"].encode()
    assert await _next_process_publishes(make_gateway, 2) == [first["id"], lost["id"]]
