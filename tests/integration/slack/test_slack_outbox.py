"""The Slack sender through the real slack_sdk against the fake Web API."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
import types
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.errors import (
    ConfigError,
    SendFailed,
    SendForbidden,
    SendRateLimited,
    SendUnconfirmed,
)
from agent_core.events import (
    Action,
    Button,
    ButtonStyle,
    EventKind,
    InboundEvent,
    MessageRef,
    OutboundMessage,
    ThreadKey,
)
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from agent_core.store.pacing import Pacer
from channels.slack.channel import SlackChannel
from channels.slack.client import channel_pace
from channels.slack.parse import parse_action
from channels.slack.state import SlackState
from tests.fakes.slack import TEAM, FakeSlack
from tests.integration.slack.conftest import make_settings

APPROVAL = (
    Button("Approve", "ap:7f3a:y", ButtonStyle.PRIMARY),
    Button("Always", "ap:7f3a:a"),
    Button("Deny", "ap:7f3a:n", ButtonStyle.DANGER),
)


def _thread(fake: FakeSlack, channel: str = "C1") -> ThreadKey:
    root = fake.add_user_message(channel, "question").ts
    return ThreadKey("slack", TEAM, channel, root)


async def test_answer_goes_into_the_thread_as_mrkdwn(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    thread = _thread(fake_slack)
    ref = await slack.outbox().send(
        thread, OutboundMessage("**Done**: see [docs](https://x.io) & `a<b`")
    )
    [msg] = fake_slack.thread("C1", thread.thread)
    assert msg.ts == ref.message_id and ref.thread == thread.thread
    assert msg.text == "*Done*: see <https://x.io|docs> &amp; `a&lt;b`"
    assert msg.blocks[0]["text"]["type"] == "mrkdwn"
    # a DM top-level conversation is answered top level
    dm = ThreadKey("slack", TEAM, "D1", "")
    await slack.outbox().send(dm, OutboundMessage("hi"))
    assert [m.text for m in fake_slack.thread("D1")] == ["hi"]


async def test_a_post_in_a_channel_parley_left_is_a_send_forbidden(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    """Removed from the channel (or it was archived): SendForbidden, so a failed
    turn is not followed by a failure notice Slack would refuse the same way."""
    thread = _thread(fake_slack)
    for error in ("not_in_channel", "is_archived"):
        fake_slack.fail("chat.postMessage", error)
        with pytest.raises(SendForbidden, match=error):
            await slack.outbox().send(thread, OutboundMessage("hi"))
    fake_slack.fail("chat.postMessage", "restricted_action")
    with pytest.raises(SendFailed) as caught:
        await slack.outbox().send(thread, OutboundMessage("hi"))
    assert not isinstance(caught.value, SendForbidden)


async def test_long_answer_is_split_in_order_under_the_limits(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    thread = _thread(fake_slack)
    paragraphs = [f"Paragraph {i}: " + "word " * 150 for i in range(40)]  # ~31k chars
    code = "```\n" + "\n".join(f"line {i}" for i in range(900)) + "\n```"
    text = "\n\n".join(paragraphs) + "\n\n" + code
    ref = await slack.outbox().send(thread, OutboundMessage(text))
    msgs = fake_slack.thread("C1", thread.thread)
    assert len(msgs) > 8
    assert all(len(m.text) < 4000 for m in msgs)
    assert all(len(b["text"]["text"]) <= 3000 for m in msgs for b in m.blocks)
    joined = "\n".join(m.text for m in msgs)
    positions = [joined.index(f"Paragraph {i}:") for i in range(40)]
    assert positions == sorted(positions)
    assert all(m.text.count("```") % 2 == 0 for m in msgs)  # code blocks closed and reopened
    assert "line 0\n" in joined and "line 899" in joined
    assert [ref.message_id, *ref.extra.split(",")] == [m.ts for m in msgs]


@pytest.mark.parametrize("pace", [0.0, 0.3])
async def test_streaming_edits_are_rate_limited_and_final_text_complete(
    fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel], pace: float
) -> None:
    ch = channel_factory(slack_stream_interval=0.3, slack_channel_pace_secs=pace)
    await ch.initialize()
    try:
        outbox = ch.outbox()
        thread = _thread(fake_slack)
        text = "Hello"
        ref = await outbox.send(thread, OutboundMessage(text, final=False))
        started = time.monotonic()
        slowest = 0.0
        while time.monotonic() - started < 1.2:  # the model streams a token every 20 ms
            text += " more"
            t0 = time.monotonic()
            ref = await outbox.edit(ref, OutboundMessage(text, final=False))
            slowest = max(slowest, time.monotonic() - t0)
            await asyncio.sleep(0.02)
        elapsed = time.monotonic() - started
        final = text + " THE END"
        ref = await outbox.edit(ref, OutboundMessage(final))
    finally:
        await ch.shutdown()
    updates = fake_slack.calls_to("chat.update")
    streamed = updates[:-1]
    assert 2 <= len(streamed) <= elapsed / 0.3 + 1
    gaps = [b.at - a.at for a, b in itertools.pairwise(streamed)]
    assert all(g >= 0.25 for g in gaps)
    assert slowest < 0.2  # a streamed edit that would have to wait is skipped, never queued
    [msg] = fake_slack.thread("C1", thread.thread)
    assert msg.text == final and updates[-1].args["text"] == final


async def test_approval_prompt_press_notice_and_edit(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    outbox = slack.outbox()
    thread = _thread(fake_slack)
    ref = await outbox.send(thread, OutboundMessage("Run `deploy.sh`?", buttons=APPROVAL))
    [msg] = fake_slack.thread("C1", thread.thread)
    section, actions = msg.blocks
    assert section["type"] == "section" and "deploy.sh" in section["text"]["text"]
    assert actions["type"] == "actions"
    els = actions["elements"]
    assert [e["text"]["text"] for e in els] == ["Approve", "Always", "Deny"]
    assert [e.get("style") for e in els] == ["primary", None, "danger"]
    assert [e["value"] for e in els] == ["ap:7f3a:y", "ap:7f3a:a", "ap:7f3a:n"]
    assert [e["action_id"] for e in els] == ["parley:approve", "parley:always", "parley:deny"]

    # someone else presses Deny: parsed into an action event, told privately
    ev = parse_action(fake_slack.press("C1", ref.message_id, "Deny", user="U2"))
    assert ev is not None and ev.kind == EventKind.ACTION
    assert ev.action == Action(token="ap:7f3a:n") and ev.user_id == "U2"
    await outbox.answer_action(ev, "Only the requester can decide this.")
    [notice] = fake_slack.ephemerals
    assert notice["user"] == "U2" and notice["channel"] == "C1"
    assert notice["thread_ts"] == thread.thread and "requester" in notice["text"]

    # the decision replaces the prompt: text says who, buttons are gone
    assert ev.reply_ref is not None
    await outbox.edit(ev.reply_ref, OutboundMessage("✅ Approved by @u1: `deploy.sh`"))
    [msg] = fake_slack.thread("C1", thread.thread)
    assert "Approved by @u1" in msg.text
    assert [b["type"] for b in msg.blocks] == ["section"]


async def test_429_honours_retry_after_and_pauses_the_channel(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_core.store.pacing import Pacer

    paused: list[str] = []
    real = Pacer.pause

    async def recording(self: Pacer, key: str, seconds: float) -> None:
        paused.append(key)
        await real(self, key, seconds)

    monkeypatch.setattr(Pacer, "pause", recording)
    thread = _thread(fake_slack, "C4")
    fake_slack.rate_limit("chat.postMessage", retry_after=0)
    await slack.outbox().send(thread, OutboundMessage("after a 429"))
    assert [c.status for c in fake_slack.calls_to("chat.postMessage", ok=None)] == [429, 200]
    assert [m.text for m in fake_slack.thread("C4", thread.thread)] == ["after a 429"]
    # the shared pace of that channel was pushed for every process (through Redis; the
    # key itself lasts the pause, here 0 s, plus the pace, so it is not checked: under
    # load it may be gone already, which failed CI once)
    assert paused == [channel_pace("C4")]
    # limited twice in a row: waited out again, the answer goes out
    fake_slack.rate_limit("chat.postMessage", times=2, retry_after=0)
    await slack.outbox().send(thread, OutboundMessage("again"))
    assert [m.text for m in fake_slack.thread("C4", thread.thread)] == ["after a 429", "again"]
    # limited for longer than _TAIL_MAX_WAIT: a clear transient error
    monkeypatch.setattr("channels.slack.outbox._TAIL_MAX_WAIT", 0.5)
    fake_slack.rate_limit("chat.postMessage", retry_after=0)
    with pytest.raises(SendRateLimited):
        await slack.outbox().send(thread, OutboundMessage("once more"))


class Waits:
    """Who waited out a 429 how long: Parley (channels.slack.outbox._pause) or
    slack_sdk's rate-limit retry handler (its asyncio.sleep).  Nobody really sleeps;
    Parley's waits can be held at a gate."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from slack_sdk.http_retry import builtin_async_handlers

        self.parley: list[float] = []
        self.sdk: list[float] = []
        self.gate = asyncio.Event()
        self.gate.set()

        async def parley(seconds: float) -> None:
            self.parley.append(seconds)
            await self.gate.wait()

        async def sdk(seconds: float) -> None:
            self.sdk.append(seconds)

        # raising=False: the test also runs (and fails) against code without _pause
        monkeypatch.setattr("channels.slack.outbox._pause", parley, raising=False)
        monkeypatch.setattr(builtin_async_handlers, "asyncio", types.SimpleNamespace(sleep=sdk))


async def _until(cond: Callable[[], bool]) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_a_rate_limited_working_reaction_never_holds_the_turn(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reactions.add / reactions.remove have their own limit (per method and
    workspace).  Their 429 must not hold the conversation: the reaction is taken
    off in the turn's end, under the thread's lock and inside the turn's timeout,
    where slack_sdk's retry handler slept the Retry-After.  Neither call waits in
    the turn now: a refused reactions.add is skipped and put on by a later typing
    call after the Retry-After; a refused reactions.remove is made again in the
    background after it.  Posting into the channel is never paused by them."""
    paused: list[str] = []
    real = Pacer.pause

    async def recording(self: Pacer, key: str, seconds: float) -> None:
        paused.append(key)
        await real(self, key, seconds)

    monkeypatch.setattr(Pacer, "pause", recording)
    waits = Waits(monkeypatch)
    user_msg = fake_slack.add_user_message("C7", "hi")
    thread = ThreadKey("slack", TEAM, "C7", user_msg.ts)
    await SlackState(redis, 60).remember(last=(thread, f"C7 {user_msg.ts}"))
    outbox = slack.outbox()

    fake_slack.rate_limit("reactions.add", retry_after=0)
    await outbox.typing(thread)  # refused: skipped, not waited out
    assert [c.status for c in fake_slack.calls_to("reactions.add", ok=None)] == [429]
    assert user_msg.reactions == set()
    fake_slack.rate_limit("reactions.add", retry_after=30)
    outbox._reactions_quiet_until = 0.0
    await outbox.typing(thread)  # the next tick tries again: refused, for 30 s now
    await outbox.typing(thread)  # within those 30 s: no request
    assert [c.status for c in fake_slack.calls_to("reactions.add", ok=None)] == [429, 429]
    outbox._reactions_quiet_until = 0.0  # the Retry-After is over
    await outbox.typing(thread)
    assert user_msg.reactions == {"eyes"}
    assert waits.sdk == [] and waits.parley == []

    fake_slack.rate_limit("reactions.remove", retry_after=3)
    waits.gate.clear()
    await outbox.turn_finished(thread, None)  # the turn's end: returns at once
    assert [c.status for c in fake_slack.calls_to("reactions.remove", ok=None)] == [429]
    assert user_msg.reactions == {"eyes"}
    await _until(lambda: waits.parley == [3.0])  # the background waits the Retry-After
    assert waits.sdk == []
    waits.gate.set()
    await _until(lambda: user_msg.reactions == set())
    assert [c.status for c in fake_slack.calls_to("reactions.remove", ok=None)] == [429, 200]
    assert paused == []


async def test_a_reaction_put_on_again_by_the_next_turn_is_left_to_it(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A removal put off by a 429 does not take off the reaction of a newer turn
    of the thread on the same message (a message that waited for its own turn):
    that turn's end does."""
    waits = Waits(monkeypatch)
    user_msg = fake_slack.add_user_message("D5", "hi")
    thread = ThreadKey("slack", TEAM, "D5", "")
    await SlackState(redis, 60).remember(last=(thread, f"D5 {user_msg.ts}"))
    outbox = slack.outbox()
    await outbox.typing(thread)
    fake_slack.rate_limit("reactions.remove", retry_after=5)
    waits.gate.clear()
    await outbox.turn_finished(thread, None)
    await _until(lambda: waits.parley == [5.0])
    await outbox.typing(thread)  # the next turn: the reaction is (still) on
    waits.gate.set()
    await asyncio.gather(*outbox._background)
    assert user_msg.reactions == {"eyes"}
    assert [c.status for c in fake_slack.calls_to("reactions.remove", ok=None)] == [429]
    await outbox.turn_finished(thread, None)
    assert user_msg.reactions == set()


async def test_a_message_the_answer_needs_waits_out_429s_once_and_within_the_bound(
    fake_slack: FakeSlack, slack: SlackChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_call_waiting bounds a message's rate-limit waits (_TAIL_MAX_WAIT, 60 s) and
    counts them; slack_sdk's retry handler also slept each Retry-After (plus up to
    1 s) and sent again inside every call, uncounted and past the channel's paused
    pace: with Retry-After 30, ~150 s and 6 requests into an active limit.  Now
    Parley's wait is the only one: Retry-After 30 -> 3 requests, 60 s (scaled
    down here: Retry-After 1, a bound of 2 s)."""
    waits = Waits(monkeypatch)
    monkeypatch.setattr("channels.slack.outbox._TAIL_MAX_WAIT", 2.0)
    thread = _thread(fake_slack, "C9")
    fake_slack.rate_limit("chat.postMessage", times=50, retry_after=1)
    with pytest.raises(SendRateLimited):
        await slack.outbox().send(thread, OutboundMessage("the answer"))
    assert [c.status for c in fake_slack.calls_to("chat.postMessage", ok=None)] == [429] * 3
    assert waits.parley == [1.0, 1.0] and waits.sdk == []


async def test_pacing_is_shared_between_processes(
    fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel]
) -> None:
    fake_slack.channel_interval = 0.2  # the fake 429s anything faster
    a = channel_factory(slack_channel_pace_secs=0.25)
    b = channel_factory(slack_channel_pace_secs=0.25)  # a second worker process
    await a.initialize()
    await b.initialize()
    try:
        thread = _thread(fake_slack, "C6")
        await asyncio.gather(
            *(
                ch.outbox().send(thread, OutboundMessage(f"m{i}"))
                for i, ch in enumerate([a, b, a, b])
            )
        )
    finally:
        await a.shutdown()
        await b.shutdown()
    posts = fake_slack.calls_to("chat.postMessage", ok=None)
    assert [c.status for c in posts] == [200] * 4
    times = sorted(c.at for c in posts)
    assert all(y - x >= 0.2 for x, y in itertools.pairwise(times))


async def test_working_reaction_added_and_removed(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis
) -> None:
    user_msg = fake_slack.add_user_message("D2", "hi")
    thread = ThreadKey("slack", TEAM, "D2", "")
    await SlackState(redis, 60).remember(last=(thread, f"D2 {user_msg.ts}"))
    event = InboundEvent(
        "m:D2:" + user_msg.ts,
        EventKind.MESSAGE,
        "slack",
        thread,
        "U1",
        reply_ref=MessageRef("slack", "D2", user_msg.ts),
    )
    outbox = slack.outbox()
    await outbox.typing(thread)
    await outbox.typing(thread)  # repeated while the turn runs: one reaction call
    assert user_msg.reactions == {"eyes"}
    assert len(fake_slack.calls_to("reactions.add", ok=None)) == 1
    await outbox.turn_finished(thread, event)
    assert user_msg.reactions == set()


async def test_working_reaction_written_with_colons_is_the_emojis_name(
    fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel], redis: Redis
) -> None:
    """SLACK_WORKING_REACTION=":eyes:" as Slack shows it: reactions.add takes the
    bare name (Slack refuses ":eyes:" with invalid_name, logged at debug only)."""
    assert make_settings(fake_slack, slack_working_reaction=" :eyes: ").slack_working_reaction == (
        "eyes"
    )
    ch = channel_factory(slack_working_reaction=":eyes:")
    await ch.initialize()
    try:
        user_msg = fake_slack.add_user_message("D2", "hi")
        thread = ThreadKey("slack", TEAM, "D2", "")
        await SlackState(redis, 60).remember(last=(thread, f"D2 {user_msg.ts}"))
        await ch.outbox().typing(thread)
        assert user_msg.reactions == {"eyes"}
    finally:
        await ch.shutdown()


async def test_slash_command_where_bot_is_not_a_member_answers_ephemerally(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    fake_slack.not_member.add("C9")
    url = fake_slack.response_url()
    reply_to = MessageRef("slack", "C9", "", extra="ru:" + url)
    thread = ThreadKey("slack", TEAM, "C9", "")
    ref = await slack.outbox().send(thread, OutboundMessage("4", final=False), reply_to=reply_to)
    await slack.outbox().edit(ref, OutboundMessage("4 (streaming)", final=False))  # skipped
    await slack.outbox().edit(ref, OutboundMessage("The answer is 4"))
    assert [
        (r["response_type"], r["replace_original"], r["text"]) for r in fake_slack.responses
    ] == [
        ("ephemeral", False, "4"),
        ("ephemeral", True, "The answer is 4"),
    ]


async def test_bad_bot_token_is_one_config_error(
    fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel]
) -> None:
    ch = channel_factory(slack_bot_token="xoxb-wrong")
    with pytest.raises(ConfigError) as info:
        await ch.initialize()
    assert info.value.problems == [
        "SLACK_BOT_TOKEN: rejected by Slack (invalid_auth); copy the Bot User OAuth Token (xoxb-...)"
    ]
    assert "xoxb-wrong" not in str(info.value)
    assert len(fake_slack.calls_to("auth.test", ok=None)) == 1


async def test_formatting_rejected_falls_back_to_text_only(
    fake_slack: FakeSlack, slack: SlackChannel, caplog: pytest.LogCaptureFixture
) -> None:
    thread = _thread(fake_slack)
    fake_slack.fail("chat.postMessage", "invalid_blocks")
    with caplog.at_level(logging.WARNING):
        await slack.outbox().send(thread, OutboundMessage("**bold** answer"))
    [msg] = fake_slack.thread("C1", thread.thread)
    assert msg.text == "*bold* answer" and msg.blocks == []
    assert "text only" in caplog.text


async def test_a_first_message_whose_blocks_slack_refuses_every_time_still_shows(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    """invalid_blocks is about the blocks themselves (a section Slack counts as too
    long): sent again with the same sections, the answer would be refused again
    and lost.  It goes text only, without an empty ``blocks`` field."""
    thread = _thread(fake_slack)
    fake_slack.refused_blocks.add("section")
    await slack.outbox().send(thread, OutboundMessage("**Done**, see the notes."))
    [msg] = fake_slack.thread("C1", thread.thread)
    assert msg.text == "*Done*, see the notes." and msg.blocks == []
    last = fake_slack.calls_to("chat.postMessage")[-1]
    assert "blocks" not in last.args


async def test_an_approval_prompt_whose_blocks_slack_refuses_keeps_its_buttons(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    thread = _thread(fake_slack)
    fake_slack.refused_blocks.add("section")
    await slack.outbox().send(thread, OutboundMessage("Run `rm -rf build`?", buttons=APPROVAL))
    [msg] = fake_slack.thread("C1", thread.thread)
    assert "rm -rf build" in msg.text
    assert [b["type"] for b in msg.blocks] == ["actions"]
    assert [e["text"]["text"] for e in msg.blocks[0]["elements"]] == ["Approve", "Always", "Deny"]


async def test_a_final_edit_whose_blocks_slack_refuses_is_sent_text_only(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    thread = _thread(fake_slack)
    box = slack.outbox()
    ref = await box.send(thread, OutboundMessage("Work", final=False))
    fake_slack.refused_blocks.add("section")
    await box.edit(ref, OutboundMessage("**Done**, see the notes."))
    [msg] = fake_slack.thread("C1", thread.thread)
    # the preview's section is gone (chat.update with blocks: [] removes it)
    assert msg.text == "*Done*, see the notes." and msg.blocks == []


async def test_pacer_pause_applies_to_other_processes(redis: Redis) -> None:
    pacer = Pacer(redis)
    await pacer.pause(channel_pace("C1"), 2.0)
    wait = await Pacer(redis).reserve([(channel_pace("C1"), 1.0)], max_wait=0.5)
    assert wait is None  # a droppable streaming edit is skipped during the pause


@pytest.mark.parametrize("fault", ["late answer", "dropped connection"])
async def test_post_whose_answer_is_lost_after_slack_stored_it_is_not_repeated(
    fault: str, fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel]
) -> None:
    """Slack stored the message but its answer never arrived (SLACK_HTTP_TIMEOUT
    passed, or the connection dropped): the sender reports it unconfirmed and nothing
    posts it again (slack_sdk's stock retry handler re-sent on a dropped connection)."""
    slack = channel_factory(slack_http_timeout=1)
    await slack.initialize()
    try:
        thread = _thread(fake_slack)
        if fault == "late answer":
            fake_slack.stall["chat.postMessage"] = 2.0
        else:
            fake_slack.drop.add("chat.postMessage")
        with pytest.raises(SendUnconfirmed):
            await slack.outbox().send(thread, OutboundMessage("stored once"))
        await asyncio.sleep(1.5)
        posts = [c for c in fake_slack.calls if c.method == "chat.postMessage"]
        assert len(posts) == 1, posts
    finally:
        await slack.shutdown()


async def test_a_new_message_claims_its_part_in_the_pacing_round_trip(
    fake_slack: FakeSlack,
    channel_factory: Callable[..., SlackChannel],
    redis_clients: RedisClients,
    packets: collections.Counter[str],
) -> None:
    """With channel pacing on, the agent's part claim rides in the booking of the
    channel's slot: one round trip before chat.postMessage, the record a second."""
    ch = channel_factory(slack_channel_pace_secs=0.2)
    await ch.initialize()
    try:
        delivery = Delivery(redis_clients.redis, redis_clients.blocking)
        first, second = _thread(fake_slack), ThreadKey("slack", TEAM, "D1", "")
        for thread in (first, second):
            await redis_clients.redis.set(keys.lock(thread), "w1")
        warm = ReplyWriter(ch.outbox(), delivery, first, "e0", {}, LockGuard(owner="w1"))
        await warm.say(OutboundMessage("warm"))  # loads the scripts into this fresh server
        packets.clear()
        await ReplyWriter(ch.outbox(), delivery, second, "e1", {}, LockGuard(owner="w1")).say(
            OutboundMessage("hello")
        )
        assert packets == {"EVALSHA": 1, "HSET": 1}
        assert await delivery.sent_ref(second, "e1:0") is not None
    finally:
        await ch.shutdown()


@pytest.mark.parametrize(
    ("error", "refused"),
    [("is_archived", True), ("internal_error", False), ("fatal_error", False)],
)
async def test_a_failed_post_gives_its_claim_back_only_if_refused(
    fake_slack: FakeSlack,
    channel_factory: Callable[..., SlackChannel],
    redis_clients: RedisClients,
    error: str,
    refused: bool,
) -> None:
    """The claim rides in the pacing booking's round trip.  Refused (is_archived):
    nothing is on screen, the claim is taken back (a rerun sends the part).  Slack's
    docs on internal_error / fatal_error: "some aspect of the operation" may have
    succeeded, so the part counts as sent with an unknown ts (never repeated)."""
    ch = channel_factory(slack_channel_pace_secs=0.2)
    await ch.initialize()
    try:
        delivery = Delivery(redis_clients.redis, redis_clients.blocking)
        thread = ThreadKey("slack", TEAM, "D1", "")
        await redis_clients.redis.set(keys.lock(thread), "w1")
        fake_slack.fail("chat.postMessage", error)
        writer = ReplyWriter(ch.outbox(), delivery, thread, "e1", {}, LockGuard(owner="w1"))
        if refused:
            with pytest.raises(SendFailed):
                await writer.say(OutboundMessage("hello"))
            assert await redis_clients.redis.hget(keys.sent(thread), "e1:0") is None
        else:
            ref = await writer.say(OutboundMessage("hello"))
            assert ref.message_id == ""
            assert await delivery.sent_ref(thread, "e1:0") == ref  # recorded, kept
        assert len(fake_slack.calls_to("chat.postMessage", ok=None)) == 1
    finally:
        await ch.shutdown()


async def test_a_private_answer_whose_reply_was_lost_is_not_posted_again(
    fake_slack: FakeSlack, slack: SlackChannel, redis_clients: RedisClients
) -> None:
    """/parley where the bot is not a member: the answer goes through the command's
    response_url.  Slack showed it and the connection dropped before its answer: it
    is not repeated (by slack_sdk's retry or by a rerun: the claim stays)."""
    fake_slack.not_member.add("C9")
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    thread = ThreadKey("slack", TEAM, "C9", "")
    await redis_clients.redis.set(keys.lock(thread), "w1")
    reply_to = MessageRef("slack", "C9", "", extra="ru:" + fake_slack.response_url())
    fake_slack.drop.add("response_url")
    writer = ReplyWriter(
        slack.outbox(), delivery, thread, "e1", {}, LockGuard(owner="w1"), reply_to=reply_to
    )
    ref = await writer.say(OutboundMessage("The answer is 4"))
    assert ref.message_id == ""
    assert [r["text"] for r in fake_slack.responses] == ["The answer is 4"]
    assert await delivery.sent_ref(thread, "e1:0") == ref


@pytest.mark.parametrize("pace", [0.0, 0.2])
async def test_a_first_post_rate_limited_twice_claims_again_and_goes_out_once(
    fake_slack: FakeSlack,
    channel_factory: Callable[..., SlackChannel],
    redis_clients: RedisClients,
    pace: float,
) -> None:
    """The first message of an answer 429'd twice in a row: its part
    claim is given back for the wait, made again, and the message posted once."""
    ch = channel_factory(slack_channel_pace_secs=pace)
    await ch.initialize()
    try:
        delivery = Delivery(redis_clients.redis, redis_clients.blocking)
        thread = ThreadKey("slack", TEAM, "D1", "")
        await redis_clients.redis.set(keys.lock(thread), "w1")
        fake_slack.rate_limit("chat.postMessage", times=2, retry_after=0)
        writer = ReplyWriter(ch.outbox(), delivery, thread, "e1", {}, LockGuard(owner="w1"))
        ref = await writer.say(OutboundMessage("hello"))
        assert [c.status for c in fake_slack.calls_to("chat.postMessage", ok=None)] == [
            429,
            429,
            200,
        ]
        assert [m.text for m in fake_slack.thread("D1")] == ["hello"]
        assert await delivery.sent_ref(thread, "e1:0") == ref
    finally:
        await ch.shutdown()


async def test_every_working_reaction_of_a_turn_is_taken_off_by_whoever_ends_it(
    fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel], redis: Redis
) -> None:
    """A message merged into a running turn is the thread's newest: it gets the
    reaction too.  The turn's end takes off both, also when another worker
    process ends it (a rerun after the first one died)."""
    a, b = channel_factory(), channel_factory()
    await a.initialize()
    await b.initialize()
    try:
        thread = ThreadKey("slack", TEAM, "D3", "")
        first = fake_slack.add_user_message("D3", "hi")
        second = fake_slack.add_user_message("D3", "and this")
        state = SlackState(redis, 60)
        await state.remember(last=(thread, f"D3 {first.ts}"))
        await a.outbox().typing(thread)
        await state.remember(last=(thread, f"D3 {second.ts}"))  # merged into the turn
        await a.outbox().typing(thread)
        assert first.reactions == {"eyes"} and second.reactions == {"eyes"}
        head = InboundEvent(
            "m:D3:" + first.ts,
            EventKind.MESSAGE,
            "slack",
            thread,
            "U1",
            reply_ref=MessageRef("slack", "D3", first.ts),
        )
        await b.outbox().turn_finished(thread, head)
        assert first.reactions == set() and second.reactions == set()
        # the next turn's reaction is put on again (the memo was cleared)
        await a.outbox().turn_finished(thread, head)
        await a.outbox().typing(thread)
        assert second.reactions == {"eyes"}
    finally:
        await a.shutdown()
        await b.shutdown()
