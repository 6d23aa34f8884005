"""Slack answers that take a narrow path: a /parley answer given privately through
its response_url (5 uses), and streamed edits that Slack rate-limits."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from agent_core.store.pacing import Pacer
from channels.slack.channel import SlackChannel
from channels.slack.client import channel_pace
from tests.fakes.slack import TEAM, FakeSlack


def _paragraphs(n: int) -> str:
    return "\n\n".join(f"Paragraph {i}: " + "word " * 150 for i in range(n))


async def _private_stream(fake_slack: FakeSlack, slack: SlackChannel, final: str) -> list[str]:
    """/parley in a channel Parley is not a member of: the answer streams privately
    (the first words, then the final edit); the texts the user was shown."""
    fake_slack.not_member.add("C9")
    reply_to = MessageRef("slack", "C9", "", extra="ru:" + fake_slack.response_url())
    thread = ThreadKey("slack", TEAM, "C9", "")
    outbox = slack.outbox()
    ref = await outbox.send(thread, OutboundMessage("Here", final=False), reply_to=reply_to)
    await outbox.edit(ref, OutboundMessage(final))
    return [str(r["text"]) for r in fake_slack.responses]


async def test_a_long_private_answer_is_shown_whole(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    shown = await _private_stream(fake_slack, slack, _paragraphs(8))  # ~6.2k characters
    assert shown[0] == "Here"
    final = "\n".join(shown[1:])
    assert [i for i in range(8) if f"Paragraph {i}:" not in final] == []
    assert fake_slack.responses[1]["replace_original"] is True  # the preview is replaced
    assert all(r["replace_original"] is False for r in fake_slack.responses[2:])


async def test_a_private_answer_too_long_for_five_uses_is_cut_and_says_so(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    shown = await _private_stream(fake_slack, slack, _paragraphs(30))  # ~8 messages
    assert len(shown) == 5  # a response_url takes 5 posts; none was refused
    assert "The rest did not fit" in shown[-1]
    assert "Paragraph 0:" in shown[1]


async def test_a_rate_limited_streamed_edit_is_skipped_not_waited_out(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis
) -> None:
    root = fake_slack.add_user_message("C5", "q").ts
    thread = ThreadKey("slack", TEAM, "C5", root)
    outbox = slack.outbox()
    ref = await outbox.send(thread, OutboundMessage("Hello", final=False))
    fake_slack.rate_limit("chat.update", retry_after=30)
    # slack_sdk's retry handler would sleep the 30 s and send the stale edit again
    await asyncio.wait_for(outbox.edit(ref, OutboundMessage("Hello wor", final=False)), 10)
    assert len(fake_slack.calls_to("chat.update", ok=None)) == 1
    # the next previews hold back for the Retry-After instead of hitting Slack again
    await outbox.edit(ref, OutboundMessage("Hello world, and", final=False))
    assert len(fake_slack.calls_to("chat.update", ok=None)) == 1
    # chat.update's limit is per workspace: posting to the channel is not paused
    assert await Pacer(redis).reserve([(channel_pace("C5"), 0.0)]) == 0
    # the final edit is never skipped
    await outbox.edit(ref, OutboundMessage("Hello world, and the rest."))
    assert fake_slack.thread("C5", root)[-1].text == "Hello world, and the rest."


async def test_a_streamed_private_answer_through_a_turns_reply_writer_is_capped(
    fake_slack: FakeSlack, slack: SlackChannel, redis_clients: RedisClients
) -> None:
    """The path a turn takes: the final text replaces the preview through the
    response_url (an edit) and must stay within the uses too."""
    fake_slack.not_member.add("C9")
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    thread = ThreadKey("slack", TEAM, "C9", "")
    await redis_clients.redis.set(keys.lock(thread), "w1")
    reply_to = MessageRef("slack", "C9", "", extra="ru:" + fake_slack.response_url())
    writer = ReplyWriter(
        slack.outbox(), delivery, thread, "e1", {}, LockGuard(owner="w1"), reply_to=reply_to
    )
    stream = writer.stream()
    await stream.feed("Here")  # the preview: the response_url's first use
    await stream.finish(_paragraphs(30))  # ~8 Slack messages
    shown = [str(r["text"]) for r in fake_slack.responses]
    assert len(shown) == 5
    assert "Paragraph 0:" in shown[1]
    assert "The rest did not fit" in shown[-1]
