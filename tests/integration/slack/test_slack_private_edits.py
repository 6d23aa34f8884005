"""A /parley answered privately through its response_url (Parley not in the
channel): the final text of a streamed answer replaces its first words, a decided
approval prompt loses its buttons, and private notices reach the user too."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from agent_core.agent.approvals import PendingApproval
from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.agent.turn_approvals import close_prompt
from agent_core.events import Button, MessageRef, OutboundMessage, ThreadKey
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from channels.slack.channel import SlackChannel
from tests.fakes.slack import TEAM, FakeSlack

THREAD = ThreadKey("slack", TEAM, "C9", "")


async def _private_writer(
    fake_slack: FakeSlack, slack: SlackChannel, redis_clients: RedisClients, event: str = "e1"
) -> ReplyWriter:
    """A turn's writer answering a /parley in C9, a channel Parley is not in."""
    fake_slack.not_member.add("C9")
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    await redis_clients.redis.set(keys.lock(THREAD), "w1")
    reply_to = MessageRef("slack", "C9", "", extra="ru:" + fake_slack.response_url())
    return ReplyWriter(
        slack.outbox(), delivery, THREAD, event, {}, LockGuard(owner="w1"), reply_to=reply_to
    )


def _prompt() -> OutboundMessage:
    return OutboundMessage(
        "Run `rm x`?", buttons=(Button("Approve", "ap:1"), Button("Deny", "ap:2"))
    )


async def test_private_streamed_answer_replaces_its_preview(
    fake_slack: FakeSlack, slack: SlackChannel, redis_clients: RedisClients
) -> None:
    writer = await _private_writer(fake_slack, slack, redis_clients)
    stream = writer.stream()
    await stream.feed("Here")
    await stream.finish("Here is the whole answer.")
    shown = [(r["text"], r["replace_original"]) for r in fake_slack.responses]
    assert shown == [("Here", False), ("Here is the whole answer.", True)]
    # the part's record stands for the private message, never a Slack ts
    sent = await redis_clients.redis.hgetall(keys.sent(THREAD))
    assert len(sent) == 1
    assert fake_slack.calls_to("chat.update", ok=None) == []


async def test_later_parts_of_a_private_answer_skip_the_refused_post(
    fake_slack: FakeSlack, slack: SlackChannel, redis_clients: RedisClients
) -> None:
    writer = await _private_writer(fake_slack, slack, redis_clients)
    stream = writer.stream()
    await stream.feed("Here")
    await stream.finish("Here is the whole answer.")
    await writer.say(_prompt())
    # one chat.postMessage refused (not_in_channel) told Parley it is not a member
    assert len(fake_slack.calls_to("chat.postMessage", ok=None)) == 1
    assert [r["text"] for r in fake_slack.responses][-1] == "Run `rm x`?"


async def test_private_approval_prompt_is_closed_after_the_decision(
    fake_slack: FakeSlack, slack: SlackChannel, redis_clients: RedisClients
) -> None:
    writer = await _private_writer(fake_slack, slack, redis_clients)
    ref = await writer.say(_prompt())
    await writer.edit(ref, OutboundMessage("✅ Approved by Ann"))
    last = fake_slack.responses[-1]
    assert last["text"].endswith("Approved by Ann"), fake_slack.responses
    assert last["replace_original"] is True
    assert not any(b.get("type") == "actions" for b in last["blocks"] or [])


async def test_private_prompt_closed_after_the_url_is_used_up_fails_quietly(
    fake_slack: FakeSlack,
    slack: SlackChannel,
    redis_clients: RedisClients,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A prompt closed later (a press, the expiry timer) whose response_url has no
    uses left: the turn goes on, a warning says why."""
    writer = await _private_writer(fake_slack, slack, redis_clients)
    ref = await writer.say(_prompt())
    for i in range(4):  # the other four uses
        await writer.say(OutboundMessage(f"note {i}"))
    a = PendingApproval("1", str(THREAD), "shell", "c1", {"cmd": "rm x"}, "slack:U1")
    a.prompt_ref = ref
    turn = SimpleNamespace(writer=writer, thread=THREAD, agent=SimpleNamespace(clock=lambda: 0.0))
    with caplog.at_level(logging.WARNING):
        await close_prompt(turn, a, "expired", "")  # type: ignore[arg-type]
    assert "could not update approval prompt" in caplog.text
    assert len(fake_slack.responses) == 5


async def test_private_notice_reaches_the_user_where_parley_is_not_a_member(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    fake_slack.not_member.add("C9")
    reply_to = MessageRef("slack", "C9", "", extra="ru:" + fake_slack.response_url())
    notice = OutboundMessage(
        "There is nothing waiting for a decision.", notice=True, private_to="U1"
    )
    ref = await slack.outbox().send(THREAD, notice, reply_to=reply_to)
    shown = [(r["text"].strip("_"), r["replace_original"]) for r in fake_slack.responses]
    assert shown == [("There is nothing waiting for a decision.", False)]
    assert ref.message_id == ""  # a notice is never edited


async def test_private_notice_without_a_response_url_still_fails(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    """Not a member and nothing to answer through: the refusal is the sender's to handle."""
    from agent_core.errors import SendFailed

    fake_slack.not_member.add("C9")
    notice = OutboundMessage("Only Ann can decide this.", notice=True, private_to="U1")
    with pytest.raises(SendFailed):
        await slack.outbox().send(THREAD, notice)


async def test_a_rerun_replaces_the_private_answer_instead_of_adding_one(
    fake_slack: FakeSlack, slack: SlackChannel, redis_clients: RedisClients
) -> None:
    """A turn run again (crash after the answer): the recorded part is the private
    message (placeholder id, not a Slack ts); the rerun replaces it, posts nothing new."""
    writer = await _private_writer(fake_slack, slack, redis_clients)
    stream = writer.stream()
    await stream.feed("Here")
    await stream.finish("Here is the whole answer.")
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    ref = await delivery.sent_ref(THREAD, "e1:0")  # as a rerun reads it
    assert isinstance(ref, MessageRef) and ref.message_id == "ru", ref
    recorded = {"e1:0": ref}
    rerun = ReplyWriter(
        slack.outbox(), delivery, THREAD, "e1", recorded, LockGuard(owner="w1"), writer.reply_to
    )
    again = rerun.stream()
    await again.feed("Here")
    await again.finish("Here is the answer, again.")
    shown = [(r["text"], r["replace_original"]) for r in fake_slack.responses]
    assert shown[2:] == [("Here is the answer, again.", True)], shown
    assert len(fake_slack.calls_to("chat.postMessage", ok=None)) == 1
