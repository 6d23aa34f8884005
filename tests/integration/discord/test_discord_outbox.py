"""Workers answer over REST (discord.py's HTTP client, no gateway) into the fake."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

import pytest
from discord_harness import Gateway, wait_client_ready
from redis.asyncio import Redis

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.errors import SendFailed, SendRateLimited, SendUnconfirmed
from agent_core.events import (
    Button,
    ButtonStyle,
    EventKind,
    MessageRef,
    OutboundMessage,
    ThreadKey,
)
from agent_core.outbox import reset_current_part, set_current_part
from agent_core.store import keys
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from agent_core.store.pacing import Pacer
from channels.discord.render import LIMIT
from channels.discord.sender import DiscordOutbox, channel_pace
from channels.discord.settings import DiscordSettings
from tests.fakes.discord import ALICE, BOB, CHANNEL_ID, DM_CHANNEL_ID, GUILD_ID, FakeDiscord

THREAD = ThreadKey("discord", GUILD_ID, CHANNEL_ID, "")
DM = ThreadKey("discord", "dm", DM_CHANNEL_ID, "")

APPROVAL_BUTTONS = (
    Button("Approve", "ap:1234567890abcdef:y", ButtonStyle.PRIMARY),
    Button("Always", "ap:1234567890abcdef:a", ButtonStyle.SECONDARY),
    Button("Deny", "ap:1234567890abcdef:n", ButtonStyle.DANGER),
)


def _fence_lines(text: str) -> int:
    return sum(1 for ln in text.split("\n") if ln.strip().startswith("```"))


async def test_long_answer_is_split_at_2000_without_breaking_code(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    code = "```python\n" + "\n".join(f"print({i})  # line {i}" for i in range(150)) + "\n```"
    text = "Intro paragraph.\n\n" + ("word " * 500) + "\n\n" + code + "\n\nThe end."
    ref = await outbox.send(THREAD, OutboundMessage(text))
    posts = fake_discord.calls_to("POST", rf"/channels/{CHANNEL_ID}/messages$")
    assert len(posts) >= 3
    contents = [c.json["content"] for c in posts]
    assert all(len(c) <= LIMIT for c in contents)
    assert all(_fence_lines(c) % 2 == 0 for c in contents)  # every part's code block closed
    assert all(c.status == 200 for c in posts)  # the fake accepted every part
    joined = "".join(contents)
    for i in range(150):
        assert f"print({i})  # line {i}" in joined
    assert contents[-1].endswith("The end.")
    # the ref points at the first part and remembers the others for later edits
    assert ref.message_id == fake_discord.messages[CHANNEL_ID][ref.message_id]["id"]
    assert len(ref.extra.split(",")) == len(posts) - 1


async def test_mentions_are_neutralised(outbox: DiscordOutbox, fake_discord: FakeDiscord) -> None:
    await outbox.send(THREAD, OutboundMessage("@everyone look, <@1500000000000000002> and <@&99>"))
    (call,) = fake_discord.calls_to("POST", r"/messages$")
    assert call.json["allowed_mentions"] == {"parse": [], "replied_user": False}
    assert "@everyone" in call.json["content"]  # shown, but pings nobody


async def test_reply_to_and_thread_destination(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    user_msg = await fake_discord.user_message(CHANNEL_ID, "hi", mention=True, dispatch=False)
    reply_to = MessageRef("discord", CHANNEL_ID, user_msg["id"])
    await outbox.send(THREAD, OutboundMessage("hello"), reply_to=reply_to)
    (call,) = fake_discord.calls_to("POST", r"/messages$")
    assert call.json["message_reference"]["message_id"] == user_msg["id"]
    thread = fake_discord.add_channel(
        "1600000000000000009", guild_id=GUILD_ID, parent_id=CHANNEL_ID
    )
    ref = await outbox.send(
        ThreadKey("discord", GUILD_ID, CHANNEL_ID, thread["id"]), OutboundMessage("in thread")
    )
    assert ref.thread == thread["id"] and ref.message_id in fake_discord.messages[thread["id"]]


async def test_streaming_edits_then_final(outbox: DiscordOutbox, fake_discord: FakeDiscord) -> None:
    assert outbox.stream_interval == 1.0
    ref = await outbox.send(DM, OutboundMessage("Thinking", final=False))
    ref = await outbox.edit(ref, OutboundMessage("Thinking about it", final=False))
    long = "x " * 1500  # grows past 2,000: a second part appears
    ref = await outbox.edit(ref, OutboundMessage(long, final=True))
    store = fake_discord.messages[DM_CHANNEL_ID]
    parts = [ref.message_id, *ref.extra[2:].split(",")]
    assert len(parts) == 2
    assert " ".join(store[p]["content"] for p in parts).split() == long.split()
    # shrinking again deletes the surplus part
    ref = await outbox.edit(ref, OutboundMessage("short"))
    assert store[ref.message_id]["content"] == "short" and ref.extra == ""
    assert parts[1] not in store


async def test_typing_indicator(outbox: DiscordOutbox, fake_discord: FakeDiscord) -> None:
    await outbox.typing(DM)
    await outbox.typing(DM)  # within Discord's 10 s: not repeated
    assert len(fake_discord.calls_to("POST", rf"/channels/{DM_CHANNEL_ID}/typing")) == 1
    await outbox.turn_finished(DM, None)
    fake_discord.fail("POST", "/typing", 403, times=10)
    await outbox.typing(DM)  # best effort: never raises
    assert fake_discord.calls_to("POST", "/typing")[-1].status == 403


async def test_429_is_waited_out_and_shared_through_the_pacer(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis: Redis
) -> None:
    fake_discord.rate_limit("POST", rf"/channels/{CHANNEL_ID}/messages$", 0.3)
    started = time.monotonic()
    started_ms = int(time.time() * 1000)
    ref = await outbox.send(THREAD, OutboundMessage("patience"))
    assert time.monotonic() - started >= 0.3
    posts = fake_discord.calls_to("POST", r"/messages$")
    assert [c.status for c in posts] == [429, 200]
    assert ref.message_id in fake_discord.messages[CHANNEL_ID]
    # the 429 paused this channel's shared pace, so every worker waited too
    paused_until = int(await redis.get(channel_pace(CHANNEL_ID)) or 0)
    assert paused_until >= started_ms + 250


async def test_long_429_raises_send_rate_limited(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    fake_discord.rate_limit("POST", r"/messages$", 120.0)
    with pytest.raises(SendRateLimited) as err:
        await outbox.send(THREAD, OutboundMessage("hi"))
    assert err.value.retry_after == pytest.approx(120.0)


async def test_permanent_failure_is_send_failed(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    fake_discord.fail("POST", r"/messages$", 403, {"message": "Missing Access", "code": 50001})
    with pytest.raises(SendFailed):
        await outbox.send(THREAD, OutboundMessage("hi"))


# --- approvals ----------------------------------------------------------------


async def test_approval_prompt_press_notice_and_resolution(
    gateway: Gateway, fake_discord: FakeDiscord
) -> None:
    box = gateway.channel.outbox()
    prompt = await box.send(
        THREAD, OutboundMessage("Run `rm -rf build`?", buttons=APPROVAL_BUTTONS)
    )
    msg = fake_discord.messages[CHANNEL_ID][prompt.message_id]
    (row,) = msg["components"]
    assert [(c["label"], c["style"], c["custom_id"]) for c in row["components"]] == [
        ("Approve", 3, "parley:ap:1234567890abcdef:y"),
        ("Always", 2, "parley:ap:1234567890abcdef:a"),
        ("Deny", 4, "parley:ap:1234567890abcdef:n"),
    ]
    # Bob (not the requester) presses Approve
    inter = await fake_discord.press(prompt.message_id, "parley:ap:1234567890abcdef:y", user=BOB)
    (event,) = await gateway.wait_published(1)
    assert event.kind is EventKind.ACTION and event.event_id == inter["id"]
    assert event.action is not None and event.action.token == "ap:1234567890abcdef:y"
    assert event.action.decision == ""
    assert event.user_id == BOB["id"] and event.thread == THREAD
    assert event.reply_ref is not None and event.reply_ref.message_id == prompt.message_id
    # deferred (no visible change) well within Discord's 3 s
    await fake_discord.wait(lambda: fake_discord.interactions[inter["id"]]["_answered"] is not None)
    answered = fake_discord.interactions[inter["id"]]["_answered"]
    assert answered["body"] == {"type": 6}
    assert answered["latency"] < 3.0
    # the core says "not yours": an ephemeral follow-up only Bob sees
    await box.answer_action(event, "Only the requester can decide this.")
    (follow,) = fake_discord.calls_to("POST", rf"/webhooks/\d+/{inter['token']}")
    assert follow.status == 200
    assert follow.json["flags"] == 64 and follow.json["content"].startswith("Only the requester")
    # the decision is shown and the buttons removed
    await box.edit(prompt, OutboundMessage("Run `rm -rf build`?\nApproved by Alice."))
    assert msg["components"] == []
    assert msg["content"].endswith("Approved by Alice.")


async def test_press_works_after_a_gateway_restart(
    make_gateway: Callable[..., Gateway], fake_discord: FakeDiscord
) -> None:
    first = make_gateway()
    await first.start()
    await wait_client_ready(first)
    prompt = await first.channel.outbox().send(
        DM, OutboundMessage("Allow?", buttons=APPROVAL_BUTTONS)
    )
    await first.halt()
    await first.channel.shutdown()
    # a brand-new process: nothing in memory knows about the prompt
    second = make_gateway()
    await second.start()
    try:
        await wait_client_ready(second)
        inter = await fake_discord.press(
            prompt.message_id, "parley:ap:1234567890abcdef:n", user=ALICE
        )
        (event,) = await second.wait_published(1)
        assert event.action is not None and event.action.token == "ap:1234567890abcdef:n"
        assert event.thread == DM and event.is_direct
        await fake_discord.wait(
            lambda: fake_discord.interactions[inter["id"]]["_answered"] is not None
        )
    finally:
        await second.halt()
        await second.channel.shutdown()


async def test_press_while_redis_is_down_tells_the_presser(
    gateway: Gateway, fake_discord: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_core.errors import StoreUnavailable

    async def down(event: object) -> None:
        raise StoreUnavailable("down")

    monkeypatch.setattr(gateway.ingest, "submit", down)
    prompt = await gateway.channel.outbox().send(
        DM, OutboundMessage("Allow?", buttons=APPROVAL_BUTTONS)
    )
    inter = await fake_discord.press(prompt.message_id, "parley:ap:1234567890abcdef:y")
    await fake_discord.wait(lambda: fake_discord.interactions[inter["id"]]["_answered"] is not None)
    body = fake_discord.interactions[inter["id"]]["_answered"]["body"]
    assert body["type"] == 4 and body["data"]["flags"] == 64
    await asyncio.sleep(0)


async def test_post_whose_answer_comes_too_late_is_asked_again_and_shown_once(
    redis: Redis, make_settings: Callable[..., DiscordSettings], fake_discord: FakeDiscord
) -> None:
    """DISCORD_HTTP_TIMEOUT bounds a REST call; a message Discord created but answered
    too late for is asked for again with its nonce: one message, and its id is known."""
    box = DiscordOutbox(make_settings(discord_http_timeout=0.5), Pacer(redis))
    try:
        await box.http()
        fake_discord.stall["POST"] = 1.5
        t0 = time.monotonic()
        ref = await box.send(THREAD, OutboundMessage("created once"))
        assert time.monotonic() - t0 < 1.4
        await asyncio.sleep(1.2)
        posts = [c for c in fake_discord.calls if c.method == "POST" and "/messages" in c.path]
        assert len(posts) == 2 and posts[0].json["nonce"] == posts[1].json["nonce"]
        (shown,) = fake_discord.messages[CHANNEL_ID].values()
        assert shown["id"] == ref.message_id and shown["content"] == "created once"
    finally:
        await box.close()


async def test_post_that_never_gets_an_answer_is_unconfirmed_not_repeated_further(
    redis: Redis, make_settings: Callable[..., DiscordSettings], fake_discord: FakeDiscord
) -> None:
    box = DiscordOutbox(make_settings(discord_http_timeout=0.3), Pacer(redis))
    try:
        await box.http()
        fake_discord.stall_every["POST"] = 1.0
        with pytest.raises(SendUnconfirmed):
            await box.send(THREAD, OutboundMessage("created once"))
        await asyncio.sleep(1.0)
        assert len(fake_discord.calls_to("POST", r"/messages$")) == 2
        assert len(fake_discord.messages[CHANNEL_ID]) == 1  # the nonce kept it to one
    finally:
        fake_discord.stall_every.clear()
        await box.close()


# --- never twice: message nonces ----------------------------------------------


async def test_a_create_that_got_a_gateway_error_is_not_posted_twice(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    """Discord created the message, the answer was a 502: discord.py retries the POST
    by itself; the nonce makes the retry return the same message."""
    fake_discord.fail("POST", rf"/channels/{CHANNEL_ID}/messages$", 502, after=True)
    token = set_current_part("e1:0")
    try:
        ref = await outbox.send(THREAD, OutboundMessage("only once"))
    finally:
        reset_current_part(token)
    posts = fake_discord.calls_to("POST", rf"/channels/{CHANNEL_ID}/messages$")
    assert [c.status for c in posts] == [502, 200]  # the retry happened
    assert posts[0].json["nonce"] == posts[1].json["nonce"]
    assert posts[0].json["enforce_nonce"] is True and len(posts[0].json["nonce"]) <= 25
    shown = [m for m in fake_discord.messages[CHANNEL_ID].values() if m["content"] == "only once"]
    assert [m["id"] for m in shown] == [ref.message_id]


async def test_the_same_part_sent_again_is_one_message_brought_up_to_date(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    token = set_current_part("e2:0")
    try:
        first = await outbox.send(THREAD, OutboundMessage("a cut-short previ"))
        again = await outbox.send(THREAD, OutboundMessage("a cut-short preview, then all of it"))
    finally:
        reset_current_part(token)
    assert again.message_id == first.message_id
    assert len(fake_discord.messages[CHANNEL_ID]) == 1
    assert fake_discord.messages[CHANNEL_ID][first.message_id]["content"] == (
        "a cut-short preview, then all of it"
    )


async def test_different_parts_with_the_same_text_are_different_messages(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    for part in ("e3:0", "e3:1", None):
        token = set_current_part(part)
        try:
            await outbox.send(THREAD, OutboundMessage("ok"))
            if part is None:  # no part name: a fresh nonce per send
                await outbox.send(THREAD, OutboundMessage("ok"))
        finally:
            reset_current_part(token)
    assert len(fake_discord.messages[CHANNEL_ID]) == 4


async def test_a_part_added_by_an_edit_is_created_once_if_the_edit_repeats(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    """An edit that grows the answer past 2,000 characters adds a message; the same
    edit again from the old reference (its result was lost) does not add another."""
    ref = await outbox.send(DM, OutboundMessage("Thinking", final=False))
    long = "x " * 1500
    grown = await outbox.edit(ref, OutboundMessage(long, final=True))
    again = await outbox.edit(ref, OutboundMessage(long, final=True))
    assert again.extra == grown.extra
    assert len(fake_discord.messages[DM_CHANNEL_ID]) == 2


async def test_a_new_message_claims_its_part_in_the_pacing_round_trip(
    outbox: DiscordOutbox, redis_clients: RedisClients, packets: collections.Counter[str]
) -> None:
    """The agent's part claim rides in the booking of the pace slots: one round
    trip before the message is created, the record after it a second."""
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    for thread in (THREAD, DM):
        await redis_clients.redis.set(keys.lock(thread), "w1")
    warm = ReplyWriter(outbox, delivery, DM, "e0", {}, LockGuard(owner="w1"))
    await warm.say(OutboundMessage("warm"))  # loads the scripts into this fresh server
    packets.clear()
    await ReplyWriter(outbox, delivery, THREAD, "e1", {}, LockGuard(owner="w1")).say(
        OutboundMessage("hello")
    )
    assert packets == {"EVALSHA": 1, "HSET": 1}
    assert await delivery.sent_ref(THREAD, "e1:0") is not None


async def test_a_refused_message_gives_its_claim_back(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis_clients: RedisClients
) -> None:
    """Discord refused the message (403 Missing Access): nothing is on screen, so
    the part's claim is taken back and a rerun would send it, not skip it."""
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    await redis_clients.redis.set(keys.lock(THREAD), "w1")
    fake_discord.fail("POST", r"/messages$", 403, {"message": "Missing Access", "code": 50001})
    with pytest.raises(SendFailed):
        await ReplyWriter(outbox, delivery, THREAD, "e1", {}, LockGuard(owner="w1")).say(
            OutboundMessage("hello")
        )
    assert await redis_clients.redis.hget(keys.sent(THREAD), "e1:0") is None


async def test_a_long_part_refused_after_its_first_message_keeps_its_claim(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis_clients: RedisClients
) -> None:
    """The first message of a long part is showing when Discord refuses the next:
    the part stays claimed, so a rerun never posts the first message again."""
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    await redis_clients.redis.set(keys.lock(THREAD), "w1")
    route = rf"/channels/{CHANNEL_ID}/messages$"
    fake_discord.fail("POST", route, 403, {"message": "Missing Access", "code": 50001}, skip=1)
    with pytest.raises(SendFailed):
        await ReplyWriter(outbox, delivery, THREAD, "e1", {}, LockGuard(owner="w1")).say(
            OutboundMessage("word " * 1000)
        )
    assert [c.status for c in fake_discord.calls_to("POST", route)] == [200, 403]
    assert (await redis_clients.redis.hget(keys.sent(THREAD), "e1:0") or b"").startswith(
        b"pending:"
    )


async def test_a_create_that_kept_getting_server_errors_is_asked_once_more(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt made the message and answered 502; discord.py's own retries
    all got 500s and it gave up.  Not a refusal (the message exists): the create is
    unconfirmed and asked once more with the same nonce, which returns the message."""
    real_sleep = asyncio.sleep
    monkeypatch.setattr(asyncio, "sleep", lambda d, *a: real_sleep(min(d, 0.01), *a))
    route = rf"/channels/{CHANNEL_ID}/messages$"
    fake_discord.fail("POST", route, 502, after=True)
    fake_discord.fail("POST", route, 500, times=4)
    token = set_current_part("e1:0")
    try:
        ref = await outbox.send(THREAD, OutboundMessage("only once"))
    finally:
        reset_current_part(token)
    assert [c.status for c in fake_discord.calls_to("POST", route)] == [
        502,
        500,
        500,
        500,
        500,
        200,
    ]
    assert [m["id"] for m in fake_discord.messages[CHANNEL_ID].values()] == [ref.message_id]


# --- a deleted preview, a rate-limited streamed edit -----------------------------------


async def test_final_answer_is_posted_anew_when_its_preview_was_deleted(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    """A moderator deleted the streamed preview: the final edit gets 404 Unknown
    Message (10008) and posts the answer as a new message instead of failing."""
    ref = await outbox.send(THREAD, OutboundMessage("partial...", final=False))
    del fake_discord.messages[CHANNEL_ID][ref.message_id]
    new = await outbox.edit(ref, OutboundMessage("the whole answer"))
    store = fake_discord.messages[CHANNEL_ID]
    assert new.message_id != ref.message_id
    assert [m["content"] for m in store.values()] == ["the whole answer"]
    # the same edit again from the old ref (a rerun after a crash before the new
    # id was recorded): the nonce of the re-post finds it, no second copy
    again = await outbox.edit(ref, OutboundMessage("the whole answer"))
    assert again.message_id == new.message_id
    assert list(store) == [new.message_id]


async def test_streamed_answer_whose_preview_was_deleted_reaches_the_user_and_is_recorded(
    outbox: DiscordOutbox, fake_discord: FakeDiscord, redis_clients: RedisClients
) -> None:
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    await redis_clients.redis.set(keys.lock(THREAD), "w1")
    writer = ReplyWriter(outbox, delivery, THREAD, "e1", {}, LockGuard(owner="w1"))
    stream = writer.stream()
    await stream.feed("partial...")
    assert stream.ref is not None
    del fake_discord.messages[CHANNEL_ID][stream.ref.message_id]
    final = await stream.finish("the whole answer")
    assert final is not None
    assert fake_discord.messages[CHANNEL_ID][final.message_id]["content"] == "the whole answer"
    # recorded: a rerun converges on the new message instead of the deleted one
    assert await delivery.sent_ref(THREAD, "e1:0") == final


async def test_a_message_a_moderator_deleted_is_not_posted_back_by_a_later_edit(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    """An approval prompt (a complete message, not a streamed preview) removed by a
    moderator: the edit that closes it (decided, expired) gets 404 Unknown Message
    and leaves it deleted instead of posting it again; the ref stays as it was."""
    ref = await outbox.send(
        THREAD, OutboundMessage("Run `rm -rf build`?", buttons=APPROVAL_BUTTONS)
    )
    del fake_discord.messages[CHANNEL_ID][ref.message_id]
    posts = len(fake_discord.calls_to("POST", rf"/channels/{CHANNEL_ID}/messages$"))
    same = await outbox.edit(ref, OutboundMessage("Run `rm -rf build`? (expired)"))
    assert same == ref
    assert len(fake_discord.calls_to("POST", rf"/channels/{CHANNEL_ID}/messages$")) == posts
    assert fake_discord.messages[CHANNEL_ID] == {}


async def test_streamed_edit_is_skipped_not_slept_through_a_429(
    outbox: DiscordOutbox, fake_discord: FakeDiscord
) -> None:
    """docs/discord.md: streamed edits are skipped, not queued.  discord.py alone
    would sleep the 429's retry_after and then send the stale text."""
    ref = await outbox.send(THREAD, OutboundMessage("partial...", final=False))
    route = rf"/channels/{CHANNEL_ID}/messages/"
    fake_discord.rate_limit("PATCH", route, 2.5)
    same = await outbox.edit(ref, OutboundMessage("partial... more", final=False))
    assert same == ref
    # back before discord.py's retry after the 2.5 s: it did not sleep the 429 out
    assert [c.status for c in fake_discord.calls_to("PATCH", route)] == [429]
    # the final edit waits the 429 out and lands; the stale edit is never sent
    await outbox.edit(ref, OutboundMessage("the whole answer"))
    await asyncio.sleep(0.3)
    assert [c.status for c in fake_discord.calls_to("PATCH", route)] == [429, 200]
    assert fake_discord.messages[CHANNEL_ID][ref.message_id]["content"] == "the whole answer"


async def test_a_stopped_streamed_edit_is_cancelled_not_left_to_land_later(
    outbox: DiscordOutbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/stop cancels the turn while a streamed edit waits (a 5xx retry, a rate-limit
    pause): the edit's request is cancelled with it, or it would land after the
    final edit and leave the stale partial text on screen."""
    ref = await outbox.send(THREAD, OutboundMessage("partial...", final=False))
    started, cancelled = asyncio.Event(), asyncio.Event()
    real = outbox._call

    async def slow(route: Any, **kwargs: Any) -> Any:
        if route.method == "PATCH":
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return await real(route, **kwargs)

    monkeypatch.setattr(outbox, "_call", slow)
    editing = asyncio.create_task(outbox.edit(ref, OutboundMessage("stale", final=False)))
    await asyncio.wait_for(started.wait(), 5)
    editing.cancel()
    await asyncio.gather(editing, return_exceptions=True)
    await asyncio.wait_for(cancelled.wait(), 5)
