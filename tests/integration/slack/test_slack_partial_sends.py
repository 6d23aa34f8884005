"""What a user sees when Slack rejects one message of a long answer after the first is
out.  Real slack_sdk against the fake Web API (tests/fakes/slack.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.events import OutboundMessage, ThreadKey
from agent_core.settings import load
from agent_core.store.delivery import Delivery
from agent_core.store.pacing import Pacer
from channels.base import ChannelDeps
from channels.slack import outbox as slack_outbox
from channels.slack.channel import SlackChannel
from channels.slack.settings import SlackSettings
from tests.fakes.slack import TEAM, FakeSlack, SlackApiFault, _RateLimited


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def slack(fake_slack: FakeSlack, redis: Redis) -> AsyncIterator[SlackChannel]:
    settings = load(
        SlackSettings,
        slack_bot_token=fake_slack.bot_token,
        slack_signing_secret=fake_slack.signing_secret,
        slack_app_token=fake_slack.app_token,
        slack_api_base_url=fake_slack.api_url,
        slack_channel_pace_secs=0.0,
        slack_stream_interval=0.2,
    )
    ch = SlackChannel(settings, ChannelDeps(redis=redis, pacer=Pacer(redis)))
    await ch.initialize()
    yield ch
    await ch.shutdown()


def _thread(fake: FakeSlack) -> ThreadKey:
    root = fake.add_user_message("C1", "question").ts
    return ThreadKey("slack", TEAM, "C1", root)


def _long_answer(n: int = 3) -> str:
    # n paragraphs of ~3,500 chars: one Slack message each
    return "\n\n".join(f"Section {i}: " + ("lorem ipsum " * 290) + f"END{i}" for i in range(n))


def _fail_post(fake: FakeSlack, nth: set[int], error: Callable[[], Exception]) -> None:
    """chat.postMessage number k (1-based) in ``nth`` answers with ``error()``."""
    real = fake._m_chat_postMessage
    count = {"n": 0}

    def wrapped(args: dict[str, Any], request: Any) -> dict[str, Any]:
        count["n"] += 1
        if count["n"] in nth:
            raise error()
        return real(args, request)

    fake._m_chat_postMessage = wrapped  # type: ignore[method-assign]


def _bot_texts(fake: FakeSlack, thread: ThreadKey) -> list[str]:
    return [m.text for m in fake.thread("C1", thread.thread) if m.user == fake.bot_user]


async def test_formatting_rejected_on_a_later_message_does_not_lose_the_tail(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    thread = _thread(fake_slack)
    _fail_post(fake_slack, {2}, lambda: SlackApiFault("invalid_blocks"))
    await slack.outbox().send(thread, OutboundMessage(_long_answer()))
    shown = "\n".join(_bot_texts(fake_slack, thread))
    for i in range(3):
        assert f"END{i}" in shown, f"section {i} never reached the user"


async def test_rate_limited_later_message_does_not_silently_truncate_the_answer(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    thread = _thread(fake_slack)
    # the 2nd message gets 429 twice: waited out, the rest must still follow.
    _fail_post(fake_slack, {2, 3}, lambda: _RateLimited(0))
    try:
        await slack.outbox().send(thread, OutboundMessage(_long_answer()))
    except Exception:
        return  # raising lets the core retry: acceptable
    shown = "\n".join(_bot_texts(fake_slack, thread))
    assert all(f"END{i}" in shown for i in range(3)), "answer cut, and send() reported success"


async def test_plain_fallback_of_an_edit_does_not_duplicate_messages(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    thread = _thread(fake_slack)
    box = slack.outbox()
    ref = await box.send(thread, OutboundMessage("Section 0: lorem", final=False))  # preview
    # final edit = 3 messages: update the preview, post #2, post #3; post #3 is refused
    _fail_post(fake_slack, {2}, lambda: SlackApiFault("invalid_blocks"))
    await box.edit(ref, OutboundMessage(_long_answer()))
    texts = _bot_texts(fake_slack, thread)
    # the refused message goes again as text only; nothing is posted twice.
    assert len(texts) == 3, [t[:12] + "…" + t[-6:] for t in texts]
    assert sum("END1" in t for t in texts) == 1


async def test_a_tail_message_whose_answer_was_lost_is_never_posted_again(
    fake_slack: FakeSlack, slack: SlackChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second message of a two-message answer left but its answer was lost
    (SendUnconfirmed): the ref keeps a place for it, so the final edit (or a rerun)
    does not post it a second time."""
    from agent_core.errors import SendUnconfirmed

    thread = _thread(fake_slack)
    box = slack.outbox()
    real = box._call
    posts = {"n": 0}

    async def call(method: str, channel: str, **kw: Any) -> Any:
        if method == "chat.postMessage":
            posts["n"] += 1
            if posts["n"] == 2:
                await real(method, channel, **kw)  # Slack posts it...
                raise SendUnconfirmed("Slack chat.postMessage: TimeoutError")  # ...unheard
        return await real(method, channel, **kw)

    monkeypatch.setattr(box, "_call", call)
    ref = await box.send(thread, OutboundMessage(_long_answer(2)))
    assert box.message_ids(ref)[1:] == ["?"]
    await box.edit(ref, OutboundMessage(_long_answer(2)))
    texts = _bot_texts(fake_slack, thread)
    assert len(texts) == 2 and sum("END1" in t for t in texts) == 1, [t[-6:] for t in texts]


async def test_final_edit_whose_later_message_stays_rate_limited_is_finished_later(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final edit needs more messages than the preview, and the 2nd stays
    rate-limited past _TAIL_MAX_WAIT (60 s, scaled): the outbox raises
    SendRateLimited with the messages now out (partial_ref) instead of reporting
    success with the rest dropped; the writer waits and finishes the answer."""
    monkeypatch.setattr(slack_outbox, "_TAIL_MAX_WAIT", 1.5)  # scaled: 60 s
    monkeypatch.setattr(ReplyWriter, "rate_limit_min_wait", 0.01)
    thread = _thread(fake_slack)
    box = slack.outbox()
    ref = await box.send(thread, OutboundMessage("Section 0: lorem", final=False))  # preview
    delivery = Delivery(redis, redis)
    w = ReplyWriter(box, delivery, thread, "ev1", {"ev1:0": ref}, LockGuard())
    # the final edit's 1st post (section 1) is refused with Retry-After 1 twice:
    # 2 s of waiting, past the (scaled) bound
    _fail_post(fake_slack, {1, 2}, lambda: _RateLimited(1))
    final = await w.edit(ref, OutboundMessage(_long_answer(3)))
    texts = _bot_texts(fake_slack, thread)
    assert len(texts) == 3 and all(f"END{i}" in texts[i] for i in range(3)), [t[-6:] for t in texts]
    assert len(box.message_ids(final)) == 3 and await delivery.sent_ref(thread, "ev1:0") == final


async def test_first_send_whose_later_message_stays_rate_limited_is_finished_later(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new three-message answer whose 2nd message stays rate-limited past
    _TAIL_MAX_WAIT: the part is recorded as the head, and after the wait the answer
    is finished by editing it (the head is not posted again)."""
    monkeypatch.setattr(slack_outbox, "_TAIL_MAX_WAIT", 1.5)  # scaled: 60 s
    monkeypatch.setattr(ReplyWriter, "rate_limit_min_wait", 0.01)
    thread = _thread(fake_slack)
    box = slack.outbox()
    delivery = Delivery(redis, redis)
    w = ReplyWriter(box, delivery, thread, "ev1", {}, LockGuard())
    _fail_post(fake_slack, {2, 3}, lambda: _RateLimited(1))
    ref = await w.say(OutboundMessage(_long_answer(3)))
    texts = _bot_texts(fake_slack, thread)
    assert len(texts) == 3 and all(f"END{i}" in texts[i] for i in range(3)), [t[-6:] for t in texts]
    assert len(box.message_ids(ref)) == 3 and await delivery.sent_ref(thread, "ev1:0") == ref


async def test_final_edit_whose_later_message_is_refused_says_it_was_cut(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    """Slack refuses a later message of the final edit for good (not a rate limit):
    the last message written ends with a "cut off" line, not silently short."""
    thread = _thread(fake_slack)
    box = slack.outbox()
    ref = await box.send(thread, OutboundMessage("Section 0: lorem", final=False))  # preview
    _fail_post(fake_slack, {1, 2}, lambda: SlackApiFault("msg_too_long"))
    await box.edit(ref, OutboundMessage(_long_answer(3)))
    texts = _bot_texts(fake_slack, thread)
    assert len(texts) == 1 and "END0" in texts[0], [t[-6:] for t in texts]
    assert texts[0].endswith(slack_outbox._CUT_OFF)


async def test_first_send_whose_later_message_is_refused_says_it_was_cut(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    thread = _thread(fake_slack)
    _fail_post(fake_slack, {3, 4}, lambda: SlackApiFault("msg_too_long"))
    await slack.outbox().send(thread, OutboundMessage(_long_answer(3)))
    texts = _bot_texts(fake_slack, thread)
    assert len(texts) == 2 and "END1" in texts[1], [t[-6:] for t in texts]
    assert texts[1].endswith(slack_outbox._CUT_OFF) and not texts[0].endswith(slack_outbox._CUT_OFF)
