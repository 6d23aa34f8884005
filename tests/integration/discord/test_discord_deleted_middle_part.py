"""A final (non-streamed) edit of a message in several parts, one of which someone
deleted: the deleted part stays deleted and the parts after it are still edited
(the edit stopped at the deleted part, leaving them with the old text)."""

from agent_core.events import OutboundMessage, ThreadKey
from channels.discord.render import message_ids
from channels.discord.sender import DiscordOutbox
from tests.fakes.discord import CHANNEL_ID, GUILD_ID, FakeDiscord

THREAD = ThreadKey("discord", GUILD_ID, CHANNEL_ID, "")


def _long(word: str) -> str:
    return "\n\n".join(f"{word} paragraph {i} " + ("x" * 900) for i in range(5))


async def test_parts_after_a_deleted_one_are_still_edited(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    ref = await outbox.send(THREAD, OutboundMessage(_long("old")))
    ids = message_ids(ref)
    assert len(ids) >= 3
    del fake_discord.messages[CHANNEL_ID][ids[1]]  # a moderator deletes the middle part
    await outbox.edit(ref, OutboundMessage(_long("new")))
    last = fake_discord.messages[CHANNEL_ID][ids[-1]]
    assert "new paragraph" in last["content"], last["content"][:80]
