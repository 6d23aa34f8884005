"""The gateway against the fake: the bot's managed role, auto-threads with GROUP_REPLY=all."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
from discord_harness import Gateway, wait_client_ready

from tests.fakes.discord import ALICE, BOT_ID, CHANNEL_ID, DM_CHANNEL_ID, GUILD_ID, FakeDiscord

ROLE_ID = "1500000000000000001"


def managed_role(role_id: str = ROLE_ID, bot_id: str = BOT_ID) -> dict[str, object]:
    """The role Discord creates for a bot when it joins (tags.bot_id = the bot)."""
    return {
        "id": role_id,
        "name": "Parley",
        "permissions": "0",
        "position": 1,
        "color": 0,
        "hoist": False,
        "managed": True,
        "mentionable": False,
        "flags": 0,
        "tags": {"bot_id": bot_id},
    }


async def test_mention_through_the_bots_managed_role_is_answered(
    gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    """Typing '@Parley' in a server offers the bot user and its integration role;
    picking the role sends <@&ROLE> (mention_roles=[ROLE], the bot not in
    ``mentions``). That is a mention of the bot."""
    await fake_discord.dispatch(
        "GUILD_ROLE_CREATE", {"guild_id": GUILD_ID, "role": managed_role()}, GUILD_ID
    )
    await fake_discord.dispatch(
        "GUILD_ROLE_CREATE",
        {"guild_id": GUILD_ID, "role": managed_role("1500000000000000002", "1100000000000000099")},
        GUILD_ID,
    )
    alice = {"id": "1000000000000000042", "username": "alice"}
    other = fake_discord._message(CHANNEL_ID, alice, "<@&1500000000000000002> ping")
    other["mention_roles"] = ["1500000000000000002"]
    raw = fake_discord._message(CHANNEL_ID, alice, f"<@&{ROLE_ID}> what's the weather?")
    raw["mention_roles"] = [ROLE_ID]
    for m in (other, raw):
        await fake_discord.dispatch("MESSAGE_CREATE", {**m, "guild_id": GUILD_ID}, GUILD_ID)
    (event,) = await gateway.wait_published(1, within=2.0)
    assert event.text == "what's the weather?"
    assert event.mentions_bot and event.event_id == raw["id"]
    await asyncio.sleep(0.2)
    assert len(await gateway.published()) == 1  # another bot's role is not ours


async def test_group_reply_all_with_auto_thread_opens_threads_only_on_mention(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    """With GROUP_REPLY=all and DISCORD_AUTO_THREAD=true, plain channel chatter is
    answered in the channel; only a message that mentions the bot opens a thread."""
    gw = make_gateway(group_reply="all", discord_auto_thread=True)
    await gw.start()
    try:
        await wait_client_ready(gw)
        chatter = await fake_discord.user_message(CHANNEL_ID, "lunch at noon?")
        (plain,) = await gw.wait_published(1)
        assert (plain.thread.conversation, plain.thread.thread) == (CHANNEL_ID, "")
        mention = await fake_discord.user_message(CHANNEL_ID, "plan my trip", mention=True)
        await fake_discord.wait_call("POST", rf"/messages/{mention['id']}/threads")
        events = await gw.wait_published(2)
        assert events[1].thread.thread == mention["id"]
        opened = fake_discord.calls_to("POST", rf"/messages/{chatter['id']}/threads")
        assert not opened, "a thread was opened on a plain, unaddressed channel message"
    finally:
        await gw.halt()


async def test_a_reply_without_its_text_gets_a_notice_once_and_a_log_line(
    make_gateway: Callable[..., Gateway],
    fake_discord: FakeDiscord,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without the Message Content intent, a reply to the bot sent with Discord's
    "@" toggle off arrives with no text: it cannot be answered, so the sender is told
    to keep the @ on (once per channel for a while) and the operator is told why."""
    fake_discord.message_content = False
    gw = make_gateway()
    await gw.start()
    try:
        await wait_client_ready(gw)
        bot_msg = fake_discord._message(CHANNEL_ID, fake_discord.bot_user, "Approve running `ls`?")
        caplog.set_level(logging.INFO)
        replies = [fake_discord._message(CHANNEL_ID, ALICE, "", reference=bot_msg) for _ in "ab"]
        for reply in replies:
            await fake_discord.dispatch("MESSAGE_CREATE", {**reply, "guild_id": GUILD_ID}, GUILD_ID)
        (notice,) = await fake_discord.wait_call("POST", rf"/channels/{CHANNEL_ID}/messages$")
        assert "@mention" in notice.json["content"]
        assert notice.json["message_reference"]["message_id"] == replies[0]["id"]
        await fake_discord.user_message(CHANNEL_ID, "and now?", mention=True)
        (event,) = await gw.wait_published(1)
        assert event.text == "and now?"  # handled after both replies: none was published
    finally:
        await gw.halt()
    posts = fake_discord.calls_to("POST", rf"/channels/{CHANNEL_ID}/messages$")
    assert len(posts) == 1  # the second reply, soon after, gets no second notice
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    told = [ln for ln in lines if "Message Content intent" in ln and CHANNEL_ID in ln]
    assert len(told) == 1, lines


async def test_stickers_polls_and_forwarded_embeds_reach_the_agent_in_words(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    """A message with no text and no file, only a sticker, a poll or (forwarded) a
    bot's embed-only message, is passed on in words as Telegram does; in a server
    a sticker among people (GROUP_REPLY=all) is not for the bot."""
    gw = make_gateway(group_reply="all")
    await gw.start()
    try:
        await wait_client_ready(gw)
        sticker = fake_discord._message(DM_CHANNEL_ID, ALICE, "")
        sticker["sticker_items"] = [{"id": "749054660769218631", "name": "Wave", "format_type": 1}]
        among_people = fake_discord._message(CHANNEL_ID, ALICE, "")
        among_people["sticker_items"] = [{"id": "1", "name": "Cat", "format_type": 1}]
        mention = fake_discord._message(
            CHANNEL_ID, ALICE, f"<@{BOT_ID}>", mentions=[fake_discord.bot_user]
        )
        mention["sticker_items"] = [{"id": "2", "name": "Thumbs up", "format_type": 1}]
        poll = fake_discord._message(DM_CHANNEL_ID, ALICE, "")
        poll["poll"] = {
            "question": {"text": "Lunch?"},
            "answers": [
                {"answer_id": 1, "poll_media": {"text": "Pizza"}},
                {"answer_id": 2, "poll_media": {"text": "Sushi"}},
            ],
        }
        forward = fake_discord._message(DM_CHANNEL_ID, ALICE, "")
        forward["message_reference"] = {"type": 1, "channel_id": CHANNEL_ID, "message_id": "9"}
        forward["message_snapshots"] = [
            {
                "message": {
                    "type": 0,
                    "timestamp": forward["timestamp"],
                    "edited_timestamp": None,
                    "flags": 0,
                    "mentions": [],
                    "mention_roles": [],
                    "content": "",
                    "embeds": [{"title": "Deploy finished", "description": "v1.2 is live"}],
                    "attachments": [],
                }
            }
        ]
        for m in (sticker, among_people, mention, poll, forward):
            guild = fake_discord.guild_of(m["channel_id"])
            data = {**m, "guild_id": guild} if guild else m
            await fake_discord.dispatch("MESSAGE_CREATE", data, guild)
        events = await gw.wait_published(4)
    finally:
        await gw.halt()
    assert [e.text for e in events] == [
        "[sticker: Wave]",
        "[sticker: Thumbs up]",
        "[poll: Lunch? / Pizza, Sushi]",
        "Forwarded message:\n> Deploy finished\n> v1.2 is live",
    ]
