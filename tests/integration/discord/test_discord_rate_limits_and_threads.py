"""Discord: 429s pause the pace they concern (the bot's for a global limit, one
channel's, or none for an interaction's own route); a long 429 or a hung REST call
in the gateway loses no message; auto-threads get a readable name and their channel
is caught up after a reconnect."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from discord_harness import Gateway, ready_gateway
from redis.asyncio import Redis

from agent_core.errors import SendRateLimited
from agent_core.events import (
    Action,
    Button,
    EventKind,
    InboundEvent,
    MessageRef,
    OutboundMessage,
    ThreadKey,
)
from agent_core.store.pacing import Pacer
from channels.discord.http import _retry_after, rate_limit_scope
from channels.discord.render import encode_extra
from channels.discord.sender import GLOBAL_PACE, DiscordOutbox, channel_pace
from tests.fakes.discord import (
    APP_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    OTHER_CHANNEL_ID,
    FakeDiscord,
)

THREAD = ThreadKey("discord", GUILD_ID, CHANNEL_ID, "")


async def test_global_429_pauses_the_whole_bot_for_every_worker(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis: Redis
) -> None:
    """Discord's global limit (body ``global: true``, ``X-RateLimit-Scope: global``)
    is per bot, not per channel: every worker must stop sending everywhere."""
    fake_discord.rate_limit("POST", rf"/channels/{CHANNEL_ID}/messages$", 2.0, is_global=True)
    sending = asyncio.create_task(outbox.send(THREAD, OutboundMessage("hello")))
    await fake_discord.wait_call("POST", r"/messages$")  # the global 429 was answered
    await asyncio.sleep(0.1)
    # meanwhile another worker wants to post in another channel of the same bot
    delay = await Pacer(redis).reserve([(channel_pace(OTHER_CHANNEL_ID), 0.0), (GLOBAL_PACE, 0.0)])
    await sending
    assert delay is not None and delay > 1.0, f"another worker may post now (wait {delay}s)"


# --- a long 429 on opening a thread ----------------------------------------------------


async def test_long_429_on_auto_thread_still_answers_the_mention(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    """'could not open a thread; answering in the channel': a thread-creation 429
    longer than DISCORD_MAX_RETRY_WAIT raises discord.RateLimited (not an
    HTTPException), which _auto_thread does not catch: the mention is dropped."""
    async with ready_gateway(make_gateway, discord_auto_thread=True) as gw:
        fake_discord.rate_limit("POST", r"/threads$", 120.0)
        msg = await fake_discord.user_message(CHANNEL_ID, "plan my trip", mention=True)
        await fake_discord.wait_call("POST", r"/threads$")
        (event,) = await gw.wait_published(1, within=3.0)
        assert event.event_id == msg["id"]


# --- auto-thread names and catch-up ----------------------------------------------------


async def test_bare_mention_auto_thread_is_not_named_with_internal_text(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    async with ready_gateway(make_gateway, discord_auto_thread=True):
        msg = await fake_discord.user_message(CHANNEL_ID, "", mention=True)  # "@Parley" alone
        (call,) = await fake_discord.wait_call("POST", rf"/messages/{msg['id']}/threads")
        assert call.json["name"] == "Parley", call.json["name"]


async def test_auto_thread_channel_mention_missed_while_disconnected_is_caught_up(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    async with ready_gateway(make_gateway, discord_auto_thread=True) as gw:
        await fake_discord.user_message(CHANNEL_ID, "plan my trip", mention=True)
        await gw.wait_published(1)
        client = gw.channel.client
        assert client is not None
        catchups = client.catchups
        # said in the same channel while the session is lost (never dispatched)
        missed = await fake_discord.user_message(
            CHANNEL_ID, "another question", mention=True, dispatch=False
        )
        await fake_discord.invalidate_sessions()
        await fake_discord.wait_ready(2)
        await fake_discord.wait(lambda: client.catchups > catchups, 10, "catch-up")
        await asyncio.sleep(0.3)
        ids = [e.event_id for e in await gw.published()]
        assert missed["id"] in ids, "the mention said during the reconnect was never answered"


async def test_429_on_one_interaction_follow_up_does_not_pause_the_whole_bot(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis: Redis
) -> None:
    """The reverse: a 429 on a press's ephemeral follow-up (its own per-interaction
    webhook bucket) has no channel id in its path, so the hook pauses the bot-wide
    GLOBAL pace: every worker stops posting answers in every channel."""
    press = InboundEvent(
        event_id="1",
        kind=EventKind.ACTION,
        channel="discord",
        thread=THREAD,
        user_id="42",
        action=Action(token="ap:1:y"),
        reply_ref=MessageRef(
            "discord", CHANNEL_ID, "9", "", encode_extra(interaction=(APP_ID, "tok"))
        ),
        received_at=time.time() - 60,  # no early-follow-up retries
    )
    fake_discord.rate_limit("POST", r"^/webhooks/", 2.0)  # per-webhook bucket, not global
    answering = asyncio.create_task(outbox.answer_action(press, "Not yours to decide."))
    await fake_discord.wait_call("POST", r"^/webhooks/")
    await asyncio.sleep(0.1)
    delay = await Pacer(redis).reserve([(channel_pace(OTHER_CHANNEL_ID), 0.0), (GLOBAL_PACE, 0.0)])
    await answering
    assert delay is not None and delay < 0.5, f"every answer of the bot now waits {delay}s"


async def test_interaction_token_is_masked_in_discord_py_429_warning(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    """discord.py's own 429 warning on a press's follow-up wrote the full URL,
    /webhooks/<app>/<token>, to the log: the interaction token, a secret."""
    token = "aW50ZXJhY3Rpb246SECRETsecretSECRETsecret"
    press = InboundEvent(
        event_id="1",
        kind=EventKind.ACTION,
        channel="discord",
        thread=THREAD,
        user_id="42",
        action=Action(token="ap:1:y"),
        reply_ref=MessageRef(
            "discord", CHANNEL_ID, "9", "", encode_extra(interaction=(APP_ID, token))
        ),
        received_at=time.time() - 60,  # no early-follow-up retries
    )
    fake_discord.rate_limit("POST", r"^/webhooks/", 0.2)
    with caplog.at_level(logging.DEBUG, logger="discord.http"):
        await outbox.answer_action(press, "Only Alice or an approver can decide this.")
    assert len(fake_discord.calls_to("POST", r"^/webhooks/")) == 2  # the 429, then the retry
    logged = [r.getMessage() for r in caplog.records if r.name == "discord.http"]
    assert any(f"/webhooks/{APP_ID}/***" in m for m in logged), logged
    assert not [m for m in logged if token in m]


async def test_a_hung_thread_creation_does_not_hold_up_every_inbound_message(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    """DISCORD_HTTP_TIMEOUT ("seconds one REST call may take") is not applied to the
    gateway's own REST client: a thread creation whose answer never comes holds the
    single inbound consumer for aiohttp's 5 minutes, and every DM / mention waits."""
    async with ready_gateway(
        make_gateway, discord_auto_thread=True, discord_http_timeout=1.0
    ) as gw:
        fake_discord.stall["POST"] = 15.0  # the thread is made, its answer is late
        await fake_discord.user_message(CHANNEL_ID, "plan my trip", mention=True)
        await fake_discord.wait_call("POST", r"/threads$")
        dm = await fake_discord.user_message(DM_CHANNEL_ID, "are you there?")
        events = await gw.wait_published(2, within=5.0)
        assert dm["id"] in [e.event_id for e in events]


async def _two_missed(gateway: Gateway, fake: FakeDiscord) -> tuple[Any, int, Any, Any]:
    """A DM and a channel mention answered, then one more in each said while the bot
    is disconnected (stored, never dispatched): the client, its catch-up count, and
    the two missed messages."""
    await fake.user_message(DM_CHANNEL_ID, "first")
    await fake.user_message(CHANNEL_ID, "in the channel", mention=True)
    await gateway.wait_published(2)
    client = gateway.channel.client
    assert client is not None
    missed_dm = await fake.user_message(DM_CHANNEL_ID, "still there?", dispatch=False)
    missed = await fake.user_message(CHANNEL_ID, "did you see this?", mention=True, dispatch=False)
    return client, client.catchups, missed_dm, missed


async def test_one_long_429_during_catch_up_does_not_abandon_every_conversation(
    gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    """catch_up skips a channel it cannot read (HTTPException), but a 429 longer than
    DISCORD_MAX_RETRY_WAIT is discord.RateLimited: the whole pass dies, and what was
    said in every other conversation during the disconnect is never read."""
    client, catchups, missed_dm, missed = await _two_missed(gateway, fake_discord)
    fake_discord.rate_limit("GET", r"/messages$", 120.0)  # the first channel read only
    await fake_discord.invalidate_sessions()
    await fake_discord.wait_ready(2)
    await asyncio.sleep(1.5)
    ids = {e.event_id for e in await gateway.published()}
    assert ids & {missed_dm["id"], missed["id"]}, "no conversation was caught up"
    assert client.catchups > catchups


# --- a connection dropped mid-request -------------------------------------------------
# discord.py's HTTPClient lets aiohttp's errors that are not OSErrors through
# (ServerDisconnectedError: Discord or a proxy closed the connection with no answer).


async def test_dropped_connection_on_auto_thread_still_answers_in_the_channel(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    async with ready_gateway(make_gateway, discord_auto_thread=True) as gw:
        fake_discord.fail("POST", r"/threads$", 0)  # hang up, no answer
        msg = await fake_discord.user_message(CHANNEL_ID, "help me", mention=True)
        (event,) = await gw.wait_published(1, within=3.0)
        assert event.event_id == msg["id"]
        assert event.thread == THREAD, "answered in the channel, no thread"


async def test_dropped_connection_reading_one_channel_does_not_abandon_the_catch_up(
    gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    client, catchups, missed_dm, missed = await _two_missed(gateway, fake_discord)
    # the first channel read hangs up (twice: aiohttp repeats an idempotent GET once)
    fake_discord.fail("GET", r"/messages$", 0, times=2)
    await fake_discord.invalidate_sessions()
    await fake_discord.wait_ready(2)
    await fake_discord.wait(lambda: client.catchups > catchups, 10, "catch-up")
    await asyncio.sleep(0.3)
    ids = {e.event_id for e in await gateway.published()}
    assert len(ids & {missed_dm["id"], missed["id"]}) == 1, "only the unread one is skipped"


async def test_dropped_connection_deferring_a_press_is_logged_not_raised(
    gateway: Gateway, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    """The press is published either way; the failed deferral is one warning line,
    not an exception escaping into discord.py's view dispatch."""
    prompt = await gateway.channel.outbox().send(
        THREAD, OutboundMessage("Allow?", buttons=(Button("Approve", "ap:1:y"),))
    )
    fake_discord.fail("POST", r"/callback$", 0)
    with caplog.at_level(logging.WARNING):
        await fake_discord.press(prompt.message_id, "parley:ap:1:y")
        (event,) = await gateway.wait_published(1)
        assert event.action is not None and event.action.token == "ap:1:y"
        await fake_discord.wait(
            lambda: any("could not defer press" in r.getMessage() for r in caplog.records),
            3,
            "the warning",
        )
    assert not [r for r in caplog.records if r.exc_info], "an exception escaped on_press"


async def test_a_long_429_fails_the_next_send_too_instead_of_sleeping_it_out(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    """A slowmode 429 asking for 10 minutes failed that send (DISCORD_MAX_RETRY_WAIT
    is 30 s), but the next answer in the channel hung for the 10 minutes."""
    fake_discord.rate_limit("POST", rf"/channels/{CHANNEL_ID}/messages$", 600.0)
    with pytest.raises(SendRateLimited):
        await outbox.send(THREAD, OutboundMessage("part one"))
    posts = len(fake_discord.calls_to("POST", rf"/channels/{CHANNEL_ID}/messages$"))
    # the timeout only avoids a hang: the old code slept the 600 s here
    with pytest.raises(SendRateLimited):
        await asyncio.wait_for(outbox.send(THREAD, OutboundMessage("next answer")), 10.0)
    assert len(fake_discord.calls_to("POST", rf"/channels/{CHANNEL_ID}/messages$")) == posts


async def test_a_press_is_acknowledged_while_discord_py_sleeps_out_a_global_429(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    """A global 429 on any gateway REST call (here: opening an auto-thread) held every
    button press behind it past Discord's 3 s: "This interaction failed".  Discord
    does not apply the global limit to interaction responses."""
    async with ready_gateway(make_gateway, discord_auto_thread=True) as gw:
        prompt = await gw.channel.outbox().send(
            ThreadKey("discord", GUILD_ID, OTHER_CHANNEL_ID, ""),
            OutboundMessage("Allow?", buttons=(Button("Approve", "ap:1:y"),)),
        )
        fake_discord.rate_limit("POST", r"/threads$", 20.0, is_global=True)
        await fake_discord.user_message(CHANNEL_ID, "help please", mention=True)
        await fake_discord.wait_call("POST", r"/threads$")
        await asyncio.sleep(0.2)  # discord.py takes the 429 in: its global lock is held
        inter = await fake_discord.press(prompt.message_id, "parley:ap:1:y")
        state = fake_discord.interactions[inter["id"]]
        await fake_discord.wait(lambda: state["_answered"] is not None, 10.0, "the deferral")
        assert state["_answered"]["body"] == {"type": 6}
        # answered while discord.py was still sleeping out the 20 s global 429
        assert len(fake_discord.calls_to("POST", r"/threads$")) == 1


# --- which 429 pauses which shared pace ------------------------------------------------


async def test_a_typing_429_does_not_hold_the_answers_in_its_channel(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis: Redis
) -> None:
    """The hook paused the channel's shared message pace for any 429 with
    /channels/<id> in its path, the typing indicator's too (a route of its own):
    every worker's answer in that channel then waited out the typing 429, and one
    longer than DISCORD_MAX_RETRY_WAIT failed the answer as rate-limited."""
    fake_discord.rate_limit("POST", rf"/channels/{CHANNEL_ID}/typing$", 20.0)
    # the turn's typing task runs beside the answer (agent_core/agent/turn.py)
    typing = asyncio.create_task(outbox.typing(THREAD))
    try:
        await fake_discord.wait_call("POST", r"/typing$")
        await asyncio.sleep(0.1)  # the 429 is in, its hook has run
        assert await redis.get(channel_pace(CHANNEL_ID)) is None
        await outbox.send(THREAD, OutboundMessage("the answer"))
        # the answer went out while discord.py still waits to retry the typing call
        calls = [
            (c.method, c.path.rsplit("/", 1)[-1], c.status)
            for c in fake_discord.calls
            if f"/channels/{CHANNEL_ID}/" in c.path
        ]
        assert calls == [("POST", "typing", 429), ("POST", "messages", 200)]
        assert not typing.done()
    finally:
        typing.cancel()
        await asyncio.gather(typing, return_exceptions=True)


async def test_a_shared_429_on_a_channel_route_pauses_that_channel(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis: Redis
) -> None:
    """``X-RateLimit-Scope: shared`` limits the channel itself, for everyone: the
    channel's answers wait, whatever route met it."""
    fake_discord.rate_limit("POST", rf"/channels/{CHANNEL_ID}/typing$", 2.0, scope="shared")
    started_ms = int(time.time() * 1000)
    await outbox.typing(THREAD)
    paused_until = int(await redis.get(channel_pace(CHANNEL_ID)) or 0)
    assert paused_until >= started_ms + 1500


def test_rate_limit_scope_and_wait() -> None:
    user = {"X-RateLimit-Scope": "user", "Retry-After": "65", "X-RateLimit-Reset-After": "64.57"}
    shared = {
        "X-RateLimit-Scope": "shared",
        "Retry-After": "1337",
        "X-RateLimit-Reset-After": "64.57",
    }
    glob = {"X-RateLimit-Scope": "global", "X-RateLimit-Global": "true", "Retry-After": "65"}
    ch = f"/api/v10/channels/{CHANNEL_ID}"
    assert rate_limit_scope("POST", f"{ch}/messages", user) == f"channel:{CHANNEL_ID}"
    assert rate_limit_scope("PATCH", f"{ch}/messages/123", user) == f"channel:{CHANNEL_ID}"
    assert rate_limit_scope("DELETE", f"{ch}/messages/123", user) == f"channel:{CHANNEL_ID}"
    # routes of their own: discord.py's bucket holds them, the channel's answers go on
    assert rate_limit_scope("POST", f"{ch}/typing", user) == ""
    assert rate_limit_scope("POST", f"{ch}/messages/123/threads", user) == ""
    assert rate_limit_scope("GET", f"{ch}/messages", user) == ""
    assert rate_limit_scope("POST", "/api/v10/webhooks/1/tok", user) == ""
    assert rate_limit_scope("POST", f"{ch}/typing", shared) == f"channel:{CHANNEL_ID}"
    assert rate_limit_scope("POST", f"{ch}/typing", glob) == "global"
    # the wait: Retry-After is whole seconds; a shared limit's reset headers are the
    # bot's own bucket's, not the resource's
    assert _retry_after(user) == 64.57
    assert _retry_after(shared) == 1337.0
    assert _retry_after(glob) == 65.0
