"""Slash commands at the gateway: an invocation is published like an addressed
message in its channel and answered within Discord's 3 s (echo, or a private line)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import discord
import pytest
from discord_harness import Gateway, wait_client_ready
from redis.asyncio import Redis

from agent_core.agent.commands import builtin_commands
from agent_core.errors import SendUnconfirmed, StoreUnavailable
from agent_core.events import EventKind, InboundEvent, OutboundMessage, ThreadKey
from agent_core.ingest import Ingest, Submitted
from agent_core.store.pacing import Pacer
from channels.base import ChannelDeps
from channels.discord.channel import DiscordChannel
from channels.discord.commands import FAILED_COMMAND_TEXT, app_commands, sync_commands
from channels.discord.http import ParleyHTTPClient
from channels.discord.sender import DiscordOutbox
from channels.discord.settings import DiscordSettings
from tests.fakes.discord import (
    ALICE,
    APP_ID,
    BOB,
    BOT_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    FakeDiscord,
)
from tests.fakes.discord_commands import stored_commands

EPHEMERAL = 64
LEGACY = {"name": "legacy", "description": "a command of an older Parley", "type": 1}


def register(fake: FakeDiscord, *extra: dict[str, Any]) -> None:
    """The application already has Parley's commands (and ``extra``)."""
    body = app_commands(builtin_commands().menu()) + list(extra)
    fake.app_commands[APP_ID] = stored_commands(APP_ID, body, [], fake.snowflake)


async def answered(fake: FakeDiscord, inter: dict[str, Any]) -> dict[str, Any]:
    """The interaction's response (within Discord's 3 s)."""
    state = fake.interactions[inter["id"]]
    await fake.wait(lambda: state["_answered"] is not None, 3.0, "the interaction response")
    answer: dict[str, Any] = state["_answered"]
    assert answer["latency"] < 3.0
    return answer["body"]  # type: ignore[no-any-return]


@pytest.fixture
async def commands_gateway(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> AsyncIterator[Gateway]:
    """A gateway that knows Parley's commands (registration off: the fake's stay)."""
    register(fake_discord, LEGACY)
    gw = make_gateway(discord_commands=False, discord_auto_thread=True)
    await gw.channel.publish_commands(builtin_commands().menu())
    await gw.start()
    await wait_client_ready(gw)
    yield gw
    await gw.halt()


async def test_a_command_in_a_channel_is_published_without_a_mention(
    commands_gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    inter = await fake_discord.slash(CHANNEL_ID, "model", "gpt-test")
    (event,) = await commands_gateway.wait_published(1)
    assert event.text == "/model gpt-test"
    assert event.kind == EventKind.COMMAND and event.mentions_bot and not event.is_direct
    assert event.thread == ThreadKey("discord", GUILD_ID, CHANNEL_ID, "")
    assert (event.event_id, event.user_id, event.user_name) == (inter["id"], ALICE["id"], "Alice")
    body = await answered(fake_discord, inter)
    assert body == {
        "type": 4,
        "data": {
            "content": "`/model gpt-test`",
            "allowed_mentions": {"parse": [], "replied_user": False},
        },
    }
    # DISCORD_AUTO_THREAD is on, yet a command talks to the channel's conversation
    await asyncio.sleep(0.2)
    assert fake_discord.calls_to("POST", r"/threads$") == []
    # the echo is the bot's own message: nothing more is published
    echo = [m for m in fake_discord.messages[CHANNEL_ID].values() if m["author"]["id"] == BOT_ID]
    assert [m["content"] for m in echo] == ["`/model gpt-test`"]
    assert len(await commands_gateway.published()) == 1


async def test_a_command_in_a_dm(commands_gateway: Gateway, fake_discord: FakeDiscord) -> None:
    inter = await fake_discord.slash(DM_CHANNEL_ID, "status")
    (event,) = await commands_gateway.wait_published(1)
    assert event.is_direct and event.text == "/status"
    assert event.thread == ThreadKey("discord", "dm", DM_CHANNEL_ID, "")
    assert (await answered(fake_discord, inter))["data"]["content"] == "`/status`"


async def test_a_command_in_a_discord_thread_talks_to_that_thread(
    commands_gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    thread_id = "1600000000000000001"
    thread = fake_discord.add_channel(
        thread_id, guild_id=GUILD_ID, parent_id=CHANNEL_ID, owner_id=ALICE["id"]
    )
    await fake_discord.dispatch("THREAD_CREATE", {**thread, "newly_created": True}, GUILD_ID)
    inter = await fake_discord.slash(thread_id, "new")
    (event,) = await commands_gateway.wait_published(1)
    assert event.thread == ThreadKey("discord", GUILD_ID, CHANNEL_ID, thread_id)
    assert (await answered(fake_discord, inter))["type"] == 4
    # as after a mention there, the thread is followed: a plain message is answered
    await fake_discord.user_message(thread_id, "and another thing")
    events = await commands_gateway.wait_published(2)
    assert events[1].text == "and another thing" and events[1].thread == event.thread


async def test_the_same_interaction_twice_is_published_once(
    commands_gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    inter = await fake_discord.slash(CHANNEL_ID, "status")
    await answered(fake_discord, inter)
    await fake_discord.redeliver(inter)
    await fake_discord.wait_call("POST", rf"/interactions/{inter['id']}/", count=2)
    await asyncio.sleep(0.2)
    assert len(await commands_gateway.published()) == 1
    assert commands_gateway.ingest.counts[Submitted.DUPLICATE] == 1


async def test_an_unknown_command_or_a_bot_is_answered_privately(
    commands_gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    legacy = await fake_discord.slash(CHANNEL_ID, "legacy")
    body = await answered(fake_discord, legacy)
    assert body["type"] == 4 and body["data"]["flags"] == EPHEMERAL
    assert "`/legacy` is not one of my commands" in body["data"]["content"]
    robot = {**ALICE, "id": "1500000000000000099", "bot": True}
    by_bot = await fake_discord.slash(CHANNEL_ID, "status", user=robot)
    body = await answered(fake_discord, by_bot)
    assert body["data"]["flags"] == EPHEMERAL and "bots" in body["data"]["content"]
    await asyncio.sleep(0.2)
    assert await commands_gateway.published() == []
    assert fake_discord.messages[CHANNEL_ID] == {}  # private answers are not in the channel


async def test_where_the_bot_cannot_post_the_user_is_told_and_nothing_runs(
    commands_gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    """The echo would show and the answer never: say so privately instead."""
    fake_discord.bot_permissions[CHANNEL_ID] = 1 << 10  # View Channel only
    inter = await fake_discord.slash(CHANNEL_ID, "status")
    body = await answered(fake_discord, inter)
    assert body["data"]["flags"] == EPHEMERAL and "Send Messages" in body["data"]["content"]
    await asyncio.sleep(0.2)
    assert await commands_gateway.published() == []


async def test_a_burst_of_commands_is_answered_in_time(
    commands_gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    """Each interaction is its own rate-limit bucket in discord.py: ten commands whose
    responses take 0.4 s each are answered side by side, not one after another
    (in one shared bucket the last ones missed Discord's 3 s)."""
    fake_discord.stall_every["POST"] = 0.4
    inters = [await fake_discord.slash(DM_CHANNEL_ID, "ping") for _ in range(10)]
    bodies = [await answered(fake_discord, i) for i in inters]
    assert all(b["type"] == 4 and "flags" not in b["data"] for b in bodies)
    latencies = [fake_discord.interactions[i["id"]]["_answered"]["latency"] for i in inters]
    assert max(latencies) < 1.5, latencies


class DownIngest(Ingest):
    """Redis is unreachable: every submit fails (as Ingest reports it)."""

    async def submit(self, event: InboundEvent) -> Submitted:
        raise StoreUnavailable("cannot publish event: ConnectionError")


class StuckIngest(Ingest):
    """Redis does not answer: a submit never returns."""

    async def submit(self, event: InboundEvent) -> Submitted:
        await asyncio.Event().wait()
        raise AssertionError


@pytest.mark.parametrize("ingest", [DownIngest, StuckIngest], ids=["down", "stuck"])
async def test_redis_unavailable_is_a_private_explanation(
    redis: Redis,
    make_settings: Callable[..., DiscordSettings],
    fake_discord: FakeDiscord,
    ingest: type[Ingest],
) -> None:
    register(fake_discord)
    deps = ChannelDeps(redis=redis, pacer=Pacer(redis))
    channel = DiscordChannel(make_settings(discord_commands=False), deps)
    await channel.publish_commands(builtin_commands().menu())
    gw = Gateway(channel, ingest(redis), redis)
    await gw.start()
    try:
        await wait_client_ready(gw)
        inter = await fake_discord.slash(CHANNEL_ID, "status")
        body = await answered(fake_discord, inter)
        assert body["type"] == 4
        assert body["data"]["content"] == FAILED_COMMAND_TEXT
        assert body["data"]["flags"] == EPHEMERAL
    finally:
        await gw.halt()


async def test_registration_against_discords_checks(fake_discord: FakeDiscord) -> None:
    """discord.py's REST client and sync_commands against the fake's checks."""
    http = ParleyHTTPClient(asyncio.get_running_loop(), api_base=fake_discord.api_base)
    await http.static_login(fake_discord.token)
    try:
        bad = [{"name": "Bad Name", "description": "x", "type": 1}]
        too_many = [{"name": f"c{i}", "description": "x", "type": 1} for i in range(101)]
        for body in (bad, too_many):
            with pytest.raises(discord.HTTPException) as refused:
                await sync_commands(http, body)
            assert (refused.value.status, refused.value.code) == (400, 50035)
        assert fake_discord.app_commands.get(APP_ID, []) == []  # refused whole
        wanted = app_commands(builtin_commands().menu())
        assert await sync_commands(http, wanted) is True
        assert await sync_commands(http, wanted) is False  # the same: not written again
        assert fake_discord.command_puts == 3
    finally:
        await http.close()
    with pytest.raises(KeyError):
        await fake_discord.slash(CHANNEL_ID, "legacy")  # Discord offers no such command
    with pytest.raises(KeyError):
        await fake_discord.slash(CHANNEL_ID, "new", "an option /new does not have")


NOT_YOURS = "Only Alice or an approver can decide this."


async def test_a_private_notice_answering_a_slash_command_is_ephemeral(
    commands_gateway: Gateway, fake_discord: FakeDiscord, outbox: DiscordOutbox
) -> None:
    """Bob's /approve on Alice's prompt got "Only Alice or an approver can decide
    this." posted for the whole channel; it is a follow-up only Bob sees."""
    inter = await fake_discord.slash(CHANNEL_ID, "approve", user=BOB)
    (event,) = await commands_gateway.wait_published(1)
    await answered(fake_discord, inter)
    notice = OutboundMessage(NOT_YOURS, notice=True, private_to=event.user_id)
    await outbox.send(event.thread, notice, reply_to=event.reply_ref)
    public = [m for m in fake_discord.messages[CHANNEL_ID].values() if NOT_YOURS in m["content"]]
    assert public == []
    (call,) = fake_discord.calls_to("POST", rf"^/webhooks/{APP_ID}/{inter['token']}$")
    assert call.status == 200 and call.json["flags"] == EPHEMERAL
    assert NOT_YOURS in call.json["content"]


async def test_a_private_notice_whose_follow_up_answer_was_lost_is_not_posted_as_well(
    commands_gateway: Gateway, fake_discord: FakeDiscord, outbox: DiscordOutbox
) -> None:
    """The follow-up was made but its answer was lost (the connection dropped): Bob
    had seen the notice privately, and it was posted for the whole channel too.
    Now the send is unconfirmed, like any send whose answer was lost."""
    inter = await fake_discord.slash(CHANNEL_ID, "approve", user=BOB)
    (event,) = await commands_gateway.wait_published(1)
    await answered(fake_discord, inter)
    fake_discord.fail("POST", r"^/webhooks/", 0, after=True)  # made, then hung up
    notice = OutboundMessage(NOT_YOURS, notice=True, private_to=event.user_id)
    with pytest.raises(SendUnconfirmed):
        await outbox.send(event.thread, notice, reply_to=event.reply_ref)
    assert len(fake_discord.calls_to("POST", rf"^/webhooks/{APP_ID}/")) == 1
    public = [m for m in fake_discord.messages[CHANNEL_ID].values() if NOT_YOURS in m["content"]]
    assert public == []


async def test_a_private_notice_for_someone_else_or_a_typed_message_is_posted(
    commands_gateway: Gateway, fake_discord: FakeDiscord, outbox: DiscordOutbox
) -> None:
    """Discord has no ephemeral message outside an interaction: a notice private to
    someone who did not invoke the command (or answering a typed message) is posted
    in the channel, as before."""
    await fake_discord.slash(CHANNEL_ID, "approve", user=ALICE)
    (event,) = await commands_gateway.wait_published(1)
    notice = OutboundMessage(NOT_YOURS, notice=True, private_to=BOB["id"])
    await outbox.send(event.thread, notice, reply_to=event.reply_ref)
    typed = OutboundMessage("typed " + NOT_YOURS, notice=True, private_to=BOB["id"])
    await outbox.send(event.thread, typed)
    public = [m for m in fake_discord.messages[CHANNEL_ID].values() if NOT_YOURS in m["content"]]
    assert len(public) == 2
    assert fake_discord.calls_to("POST", r"^/webhooks/") == []


async def test_a_command_is_answered_while_discord_py_sleeps_out_a_global_429(
    commands_gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    """A global 429 on opening an auto-thread held every slash command's response
    behind it past Discord's 3 s: "This interaction failed"."""
    fake_discord.rate_limit("POST", r"/threads$", 20.0, is_global=True)
    await fake_discord.user_message(CHANNEL_ID, "help please", mention=True)
    await fake_discord.wait_call("POST", r"/threads$")
    await asyncio.sleep(0.2)  # discord.py takes the 429 in: its global lock is held
    inter = await fake_discord.slash(CHANNEL_ID, "status")
    state = fake_discord.interactions[inter["id"]]
    await fake_discord.wait(lambda: state["_answered"] is not None, 10.0, "the echo")
    assert state["_answered"]["body"]["data"]["content"] == "`/status`"
    assert len(fake_discord.calls_to("POST", r"/threads$")) == 1  # still held
