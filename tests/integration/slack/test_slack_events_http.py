"""POST /slack/events: signatures, url_verification, retries, routing, into Ingest (real Redis)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.applications import Starlette

from agent_core.events import (
    Button,
    EventKind,
    InboundEvent,
    MessageRef,
    OutboundMessage,
    ThreadKey,
)
from agent_core.ingest import Ingest
from channels.slack.channel import SlackChannel
from channels.slack.inbound import (
    PRESS_NOT_TAKEN_TEXT,
    STORE_DOWN_TEXT,
    EventsEndpoint,
    SlackInbound,
)
from channels.slack.state import SlackState
from tests.fakes.slack import BOT_USER, TEAM, FakeSlack

Published = Callable[[], Awaitable[list[InboundEvent]]]


async def test_good_signature_publishes_dm(
    fake_slack: FakeSlack, app: httpx.AsyncClient, redis: Redis, published: Published
) -> None:
    body = fake_slack.message("D1", "hello <@UBOT> there")
    resp = await app.post("/slack/events", content=b"", headers={})  # unsigned: refused
    assert resp.status_code == 401
    resp = await fake_slack.deliver(app, body)
    assert resp.status_code == 200
    [ev] = await published()
    ts = body["event"]["ts"]
    assert ev.kind == EventKind.MESSAGE
    assert ev.thread == ThreadKey("slack", TEAM, "D1", "")
    assert ev.text == "hello there"
    assert ev.is_direct and ev.user_id == "U1"
    assert ev.event_id == f"m:D1:{ts}"
    assert ev.reply_ref == MessageRef("slack", "D1", ts, thread="")


async def test_bad_and_stale_signatures_are_401_and_nothing_happens(
    fake_slack: FakeSlack, app: httpx.AsyncClient, redis: Redis, published: Published
) -> None:
    body = fake_slack.message("D1", "hi")
    bad = await fake_slack.deliver(app, body, secret="not-the-secret")
    stale = await fake_slack.deliver(app, body, timestamp=int(time.time()) - 6 * 60)
    future = await fake_slack.deliver(app, body, timestamp=int(time.time()) + 6 * 60)
    assert (bad.status_code, stale.status_code, future.status_code) == (401, 401, 401)
    assert await published() == []
    # a body altered after signing is refused too
    raw = b'{"type":"url_verification","challenge":"x"}'
    headers = {"Content-Type": "application/json", **fake_slack.sign(b"{}")}
    assert (await app.post("/slack/events", content=raw, headers=headers)).status_code == 401
    # and a still-fresh timestamp (4 minutes) is accepted
    ok = await fake_slack.deliver(app, body, timestamp=int(time.time()) - 4 * 60)
    assert ok.status_code == 200
    assert len(await published()) == 1


async def test_url_verification(fake_slack: FakeSlack, app: httpx.AsyncClient) -> None:
    body = {
        "token": "x",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification",
    }
    resp = await fake_slack.deliver(app, body)
    assert resp.status_code == 200
    assert resp.json() == {"challenge": body["challenge"]}


async def test_retries_are_answered_once(
    fake_slack: FakeSlack, app: httpx.AsyncClient, redis: Redis, published: Published
) -> None:
    body = fake_slack.message("C1", "<@UBOT> what is up", kind="app_mention")
    first = await fake_slack.deliver(app, body)
    again = await fake_slack.deliver(app, body, retry_num=1)
    third = await fake_slack.deliver(app, body, retry_num=2)
    assert [r.status_code for r in (first, again, third)] == [200, 200, 200]
    assert len(await published()) == 1
    # the `message` copy Slack also sends for a mention (other event_id) is not a second event
    copy = fake_slack.event_body({**body["event"], "type": "message", "channel_type": "channel"})
    assert (await fake_slack.deliver(app, copy)).status_code == 200
    assert len(await published()) == 1


async def test_channel_mention_starts_a_thread_and_follow_ups_need_no_mention(
    fake_slack: FakeSlack, app: httpx.AsyncClient, redis: Redis, published: Published
) -> None:
    mention = fake_slack.message("C1", "<@UBOT> summarise this", kind="app_mention")
    root = mention["event"]["ts"]
    await fake_slack.deliver(app, mention)
    # a reply in that thread, without mention
    follow = fake_slack.message("C1", "and shorter please", thread_ts=root)
    await fake_slack.deliver(app, follow)
    # a plain message at top level and one in an unrelated thread are not for us
    await fake_slack.deliver(app, fake_slack.message("C1", "lunch?"))
    other_root = fake_slack.add_user_message("C1", "unrelated").ts
    await fake_slack.deliver(app, fake_slack.message("C1", "agree", thread_ts=other_root))
    events = await published()
    assert [e.text for e in events] == ["summarise this", "and shorter please"]
    assert {e.thread for e in events} == {ThreadKey("slack", TEAM, "C1", root)}
    assert events[0].mentions_bot and not events[0].is_direct
    assert not events[1].mentions_bot and not events[1].is_direct


async def test_mention_inside_a_thread_uses_the_thread_root(
    fake_slack: FakeSlack, app: httpx.AsyncClient, redis: Redis, published: Published
) -> None:
    root = fake_slack.add_user_message("C2", "a discussion").ts
    await fake_slack.deliver(
        app, fake_slack.message("C2", "<@UBOT> thoughts?", kind="app_mention", thread_ts=root)
    )
    [ev] = await published()
    assert ev.thread == ThreadKey("slack", TEAM, "C2", root)


async def test_dm_thread_reply_is_its_own_conversation(
    fake_slack: FakeSlack, app: httpx.AsyncClient, redis: Redis, published: Published
) -> None:
    first = fake_slack.message("D9", "top level")
    await fake_slack.deliver(app, first)
    await fake_slack.deliver(
        app, fake_slack.message("D9", "in a thread", thread_ts=first["event"]["ts"])
    )
    a, b = await published()
    assert a.thread == ThreadKey("slack", TEAM, "D9", "")
    assert b.thread == ThreadKey("slack", TEAM, "D9", first["event"]["ts"])


async def test_threads_the_bot_posted_in_accept_follow_ups(
    fake_slack: FakeSlack,
    slack: SlackChannel,
    app: httpx.AsyncClient,
    redis: Redis,
    published: Published,
) -> None:
    root = fake_slack.add_user_message("C3", "question for everyone").ts
    thread = ThreadKey("slack", TEAM, "C3", root)
    await slack.outbox().send(thread, OutboundMessage("I can help"))
    await fake_slack.deliver(app, fake_slack.message("C3", "thanks, go on", thread_ts=root))
    [ev] = await published()
    assert ev.thread == thread and ev.text == "thanks, go on"


async def test_bot_and_edited_messages_are_ignored(
    fake_slack: FakeSlack, app: httpx.AsyncClient, redis: Redis, published: Published
) -> None:
    own = fake_slack.message("D1", "my own answer", user=BOT_USER)
    other_bot = fake_slack.message("D1", "beep", bot_id="B999")
    edited = fake_slack.message("D1", "x", subtype="message_changed")
    deleted = fake_slack.message("D1", "x", subtype="message_deleted")
    joined = fake_slack.message("C1", "<@U1> has joined", subtype="channel_join")
    for body in (own, other_bot, edited, deleted, joined):
        assert (await fake_slack.deliver(app, body)).status_code == 200
    assert await published() == []
    # a file shared in a DM is a message with an attachment (not downloaded)
    shared = fake_slack.message(
        "D1",
        "see file",
        subtype="file_share",
        files=[
            {
                "id": "F1",
                "name": "a.png",
                "mimetype": "image/png",
                "size": 12,
                "url_private": "https://files/F1",
            }
        ],
    )
    await fake_slack.deliver(app, shared)
    [ev] = await published()
    assert ev.attachments[0].kind == "image" and ev.attachments[0].ref == "https://files/F1"
    assert not fake_slack.calls_to("files.info", ok=None)


async def test_group_reply_all_answers_top_level_channel_messages(
    fake_slack: FakeSlack, channel_factory, ingest: Ingest, redis: Redis, published: Published
) -> None:
    ch = channel_factory(group_reply="all")
    await ch.initialize()
    try:
        asgi = httpx.ASGITransport(app=Starlette(routes=ch.routes(ingest)))
        async with httpx.AsyncClient(transport=asgi, base_url="http://p") as client:
            body = fake_slack.message("C5", "anyone?")
            await fake_slack.deliver(client, body)
    finally:
        await ch.shutdown()
    [ev] = await published()
    assert ev.thread == ThreadKey("slack", TEAM, "C5", body["event"]["ts"])


async def test_slash_command_is_acked_ephemerally_and_published(
    fake_slack: FakeSlack, app: httpx.AsyncClient, redis: Redis, published: Published
) -> None:
    form = fake_slack.command("C7", "what is 2+2?")
    resp = await fake_slack.deliver(app, form, form=True)
    assert resp.status_code == 200
    assert resp.json()["response_type"] == "ephemeral"
    assert "what is 2+2?" in resp.json()["text"]
    [ev] = await published()
    assert ev.text == "what is 2+2?" and ev.mentions_bot
    assert ev.thread == ThreadKey("slack", TEAM, "C7", "")
    assert ev.reply_ref is not None and ev.reply_ref.extra == "ru:" + form["response_url"]
    # the same invocation delivered twice is one event
    await fake_slack.deliver(app, form, form=True, retry_num=1)
    assert len(await published()) == 1
    # another app's command is not ours
    other = fake_slack.command("C7", "x", command="/other")
    await fake_slack.deliver(app, other, form=True)
    assert len(await published()) == 1


async def test_replies_under_a_slash_command_answer_need_a_mention(
    fake_slack: FakeSlack,
    slack: SlackChannel,
    app: httpx.AsyncClient,
    redis: Redis,
    published: Published,
) -> None:
    """/parley answers in the channel's own conversation, at top level.  People
    replying in the thread under that answer talk among themselves unless they
    mention Parley (as in any channel thread it did not start); a mention there
    starts that thread's own conversation, which then needs no mention."""
    await fake_slack.deliver(app, fake_slack.command("C9", "summarise the incident"), form=True)
    [cmd] = await published()
    ref = await slack.outbox().send(
        cmd.thread, OutboundMessage("Here is the summary"), reply_to=cmd.reply_ref
    )
    assert ref.thread == "" and ref.message_id
    chat = fake_slack.message("C9", "lol that's wrong, it was the DB", thread_ts=ref.message_id)
    await fake_slack.deliver(app, chat)
    assert len(await published()) == 1  # not answered: nobody addressed Parley
    ask = fake_slack.message(
        "C9", "<@UBOT> was it the DB?", kind="app_mention", thread_ts=ref.message_id
    )
    await fake_slack.deliver(app, ask)
    follow = fake_slack.message("C9", "and when?", thread_ts=ref.message_id)
    await fake_slack.deliver(app, follow)
    events = await published()
    assert [e.text for e in events[1:]] == ["was it the DB?", "and when?"]
    assert {e.thread for e in events[1:]} == {ThreadKey("slack", TEAM, "C9", ref.message_id)}


async def test_button_press_is_acked_and_published_as_action(
    fake_slack: FakeSlack,
    slack: SlackChannel,
    app: httpx.AsyncClient,
    redis: Redis,
    published: Published,
) -> None:
    from agent_core.events import Button, ButtonStyle

    root = fake_slack.add_user_message("C8", "do it").ts
    thread = ThreadKey("slack", TEAM, "C8", root)
    prompt = OutboundMessage(
        "Run `rm -rf build`?",
        buttons=(
            Button("Approve", "ap:123:y", ButtonStyle.PRIMARY),
            Button("Always", "ap:123:a"),
            Button("Deny", "ap:123:n", ButtonStyle.DANGER),
        ),
    )
    ref = await slack.outbox().send(thread, prompt)
    payload = fake_slack.press("C8", ref.message_id, "Always", user="U2")
    resp = await fake_slack.deliver(app, payload, form=True)
    assert resp.status_code == 200 and resp.content == b""
    [ev] = await published()
    assert ev.kind == EventKind.ACTION
    assert ev.action is not None and ev.action.token == "ap:123:a" and ev.action.decision == ""
    assert ev.user_id == "U2" and ev.thread == thread
    assert ev.reply_ref == MessageRef("slack", "C8", ref.message_id, thread=root)


@asynccontextmanager
async def store_down(
    fake_slack: FakeSlack,
) -> AsyncIterator[tuple[httpx.AsyncClient, SlackInbound]]:
    """The events route (and its inbound) on a Redis that never answers."""
    broken = Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    try:
        inbound = SlackInbound(Ingest(broken), SlackState(broken, 60), bot_user_id=lambda: BOT_USER)
        asgi = Starlette(routes=EventsEndpoint(inbound, fake_slack.signing_secret).routes())
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=asgi), base_url="http://p"
        ) as c:
            yield c, inbound
    finally:
        await broken.aclose()


async def test_store_unavailable_answers_503_so_slack_retries(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis
) -> None:
    async with store_down(fake_slack) as (c, _):
        dm = await fake_slack.deliver(c, fake_slack.message("D1", "hello"))
        follow = await fake_slack.deliver(c, fake_slack.message("C1", "x", thread_ts="1.000001"))
    assert dm.status_code == 503 and follow.status_code == 503


async def test_a_slash_command_while_the_store_is_down_is_answered_with_why(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis
) -> None:
    """Slack never delivers a slash command again: the 503 showed Slack's bare
    "/parley failed with the error …" and the command was lost without a word."""
    async with store_down(fake_slack) as (c, _):
        r = await fake_slack.deliver(c, fake_slack.command("C1", "hello"), form=True)
    assert r.status_code == 200
    assert r.json() == {"response_type": "ephemeral", "text": STORE_DOWN_TEXT}


async def test_a_button_press_while_the_store_is_down_tells_its_presser(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis
) -> None:
    """Slack never delivers a press again: the 503 left only Slack's error mark on
    the button, and the person did not know whether the approval was taken."""
    root = fake_slack.add_user_message("C8", "do it").ts
    prompt = OutboundMessage("Run `make`?", buttons=(Button("Approve", "ap:9:y"),))
    ref = await slack.outbox().send(ThreadKey("slack", TEAM, "C8", root), prompt)
    async with store_down(fake_slack) as (c, inbound):
        r = await fake_slack.deliver(
            c, fake_slack.press("C8", ref.message_id, "Approve"), form=True
        )
        assert r.status_code == 200
        await asyncio.gather(*inbound._notices)  # the note is sent after the ack
    [note] = fake_slack.responses
    assert note["text"] == PRESS_NOT_TAKEN_TEXT
    assert note["response_type"] == "ephemeral" and note["replace_original"] is False
    assert [m.text for m in fake_slack.messages.values()][-1].startswith("Run")  # prompt kept


async def test_a_press_without_a_response_url_while_the_store_is_down_is_503(
    fake_slack: FakeSlack, slack: SlackChannel, redis: Redis
) -> None:
    root = fake_slack.add_user_message("C8", "do it").ts
    prompt = OutboundMessage("Run `make`?", buttons=(Button("Approve", "ap:9:y"),))
    ref = await slack.outbox().send(ThreadKey("slack", TEAM, "C8", root), prompt)
    payload = fake_slack.press("C8", ref.message_id, "Approve")
    del payload["response_url"]
    async with store_down(fake_slack) as (c, _):
        r = await fake_slack.deliver(c, payload, form=True)
    assert r.status_code == 503 and fake_slack.responses == []


async def test_ack_is_fast(fake_slack: FakeSlack, app: httpx.AsyncClient) -> None:
    started = time.perf_counter()
    for i in range(20):
        await fake_slack.deliver(app, fake_slack.message("D1", f"m{i}"))
    assert (time.perf_counter() - started) / 20 < 0.5


REFUSAL = "Sorry, I only answer people on this bot's allow list here."


async def _mention_in_thread(
    fake_slack: FakeSlack, app: httpx.AsyncClient, published: Published, root: str, user: str
) -> InboundEvent:
    body = fake_slack.message("C5", f"<@{BOT_USER}> hi", user=user, kind="app_mention",
                              thread_ts=root)  # fmt: skip
    assert (await fake_slack.deliver(app, body)).status_code == 200
    return (await published())[-1]


async def test_a_refused_mention_does_not_make_parley_follow_the_thread(
    fake_slack: FakeSlack, app: httpx.AsyncClient, slack: SlackChannel, published: Published
) -> None:
    """ALLOWED_USERS set: a stranger mentions Parley in a thread and the worker
    refuses them (a notice, then the turn ends).  People on the list talking among
    themselves there afterwards, without a mention, are not taken as addressing
    Parley (they were, for the thread's TTL: the thread was joined at ingest)."""
    root = fake_slack.add_user_message("C5", "lunch plans").ts
    thread = ThreadKey("slack", TEAM, "C5", root)
    ev = await _mention_in_thread(fake_slack, app, published, root, "USTRANGER")
    assert ev.thread == thread
    outbox = slack.outbox()
    await outbox.send(
        thread, OutboundMessage(REFUSAL, notice=True, refusal=True)
    )  # the worker refuses
    await outbox.turn_finished(thread, ev)
    aside = fake_slack.message("C5", "Bob, lunch at 1?", user="UALICE", thread_ts=root)
    assert (await fake_slack.deliver(app, aside)).status_code == 200
    assert [e.event_id for e in await published()] == [ev.event_id]


@pytest.mark.parametrize(
    "notice",
    [
        "The model is not answering right now. Try again in a minute.",  # an LLM error
        "You have used today's AI budget.",  # a budget refusal (not an access one)
        "⏹ Stopped.",
        "I stopped after too many steps without an answer.",
    ],
)
async def test_a_turn_that_ends_with_a_notice_keeps_the_thread_followed(
    fake_slack: FakeSlack,
    app: httpx.AsyncClient,
    slack: SlackChannel,
    published: Published,
    notice: str,
) -> None:
    """An allowed person's mention whose turn's only post is a notice: their plain
    reply to it there ("try again") is a follow-up.  Before, only an answer kept
    the thread followed; any notice was taken for an access refusal's."""
    root = fake_slack.add_user_message("C5", "deploy question").ts
    thread = ThreadKey("slack", TEAM, "C5", root)
    ev = await _mention_in_thread(fake_slack, app, published, root, "UALICE")
    outbox = slack.outbox()
    await outbox.send(thread, OutboundMessage(notice, notice=True))
    await outbox.turn_finished(thread, ev)
    retry = fake_slack.message("C5", "try again please", user="UALICE", thread_ts=root)
    assert (await fake_slack.deliver(app, retry)).status_code == 200
    assert [e.text for e in await published()][-1] == "try again please"


async def test_an_answered_mention_makes_parley_follow_the_thread(
    fake_slack: FakeSlack, app: httpx.AsyncClient, slack: SlackChannel, published: Published
) -> None:
    """Control: a mention that is answered keeps the thread followed after its turn;
    a refused stranger's mention later in it does not undo that; and a plain reply
    sent while the mention still waits for its answer is a follow-up, as before."""
    root = fake_slack.add_user_message("C5", "deploy question").ts
    thread = ThreadKey("slack", TEAM, "C5", root)
    ev = await _mention_in_thread(fake_slack, app, published, root, "UALICE")
    early = fake_slack.message("C5", "also, staging", user="UALICE", thread_ts=root)
    await fake_slack.deliver(app, early)  # before the answer: followed meanwhile
    assert [e.text for e in await published()][-1] == "also, staging"
    outbox = slack.outbox()
    await outbox.send(thread, OutboundMessage("Here is how"))
    await outbox.turn_finished(thread, ev)
    stranger = await _mention_in_thread(fake_slack, app, published, root, "USTRANGER")
    await outbox.send(thread, OutboundMessage(REFUSAL, notice=True, refusal=True))
    await outbox.turn_finished(thread, stranger)
    later = fake_slack.message("C5", "thanks, go on", user="UALICE", thread_ts=root)
    await fake_slack.deliver(app, later)
    assert [e.text for e in await published()][-1] == "thanks, go on"
