"""How a Slack approval prompt says to answer in words depends on the conversation:
in a channel's own conversation (what /parley talks to) a plain "yes" never reaches
Parley and "@Parley yes" starts a thread of its own, so the prompt and the notices
say `/parley yes`, and that works; in a thread Parley answers in, and in a DM,
typing works.  Real Runtime (worker), real slack_sdk, fake Slack."""

from __future__ import annotations

from typing import Any

import httpx
from redis.asyncio import Redis

from agent_core.events import ThreadKey
from agent_core.store.embedded import EmbeddedValkey
from channels.slack.channel import SlackChannel
from tests.fakes.slack import TEAM, FakeSlack, Message
from tests.integration.approvals_e2e.approvals_harness import (
    ASK,
    demo_runs,
    process,
    turn_finished,
    wait_until,
)
from tests.integration.slack.approval_setup import has_buttons, slack_settings


async def test_a_top_level_prompt_asks_for_the_slash_command_which_decides(
    valkey: EmbeddedValkey, redis: Redis, fake_slack: FakeSlack
) -> None:
    async with process(slack_settings(valkey, fake_slack), "all") as rt:
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:

            async def command(text: str) -> None:
                form = fake_slack.command("C1", text)
                resp = await fake_slack.deliver(client, form, form=True)
                assert resp.status_code == 200, resp.text

            def prompt() -> Message | None:
                return next((m for m in fake_slack.thread("C1") if has_buttons(m)), None)

            await command(ASK)
            shown = await wait_until(prompt, what="the approval prompt")
            await turn_finished(rt)
            assert "Sending `/parley yes` / `/parley always` / `/parley no` works too" in (
                shown.text
            ), shown.text
            assert "Typing" not in shown.text
            # a message while it waits is held, and told the same
            await command("and what else?")
            await wait_until(
                lambda: any("waiting for your decision" in m.text for m in fake_slack.thread("C1")),
                what="the held message's notice",
            )
            notice = next(m for m in fake_slack.thread("C1") if "waiting for your" in m.text)
            assert "`/parley yes`" in notice.text and "type yes" not in notice.text, notice.text
            await turn_finished(rt)
            # what the prompt says works: "/parley yes" is the approval
            await command("yes")

            async def ran() -> bool:
                return await demo_runs(redis) == 1

            await wait_until(ran, what="the approved tool to run")
            closed = fake_slack.messages[("C1", shown.ts)]
            assert not has_buttons(closed) and "Approved" in closed.text
    assert await demo_runs(redis) == 1


async def test_typing_is_offered_in_a_thread_and_a_dm(slack: SlackChannel) -> None:
    outbox: Any = slack.outbox()
    assert outbox.typed_command(ThreadKey("slack", TEAM, "C1", "1700000000.000100")) is None
    assert outbox.typed_command(ThreadKey("slack", TEAM, "D1", "")) is None
    assert outbox.typed_command(ThreadKey("slack", TEAM, "C1", "")) == "/parley"


async def test_the_hint_names_the_configured_command(
    fake_slack: FakeSlack, channel_factory: Any
) -> None:
    ch = channel_factory(slack_slash_command="/ask")
    await ch.initialize()
    try:
        outbox: Any = ch.outbox()
        assert outbox.typed_command(ThreadKey("slack", TEAM, "C1", "")) == "/ask"
    finally:
        await ch.shutdown()


async def test_an_expired_private_prompt_answers_the_held_message_privately(
    valkey: EmbeddedValkey, redis: Redis, fake_slack: FakeSlack
) -> None:
    """/parley where Parley is not a member: everything goes through the commands'
    response_urls.  When the prompt expires, the message held meanwhile is answered
    through its own command's response_url (the timer's event has none)."""
    import time

    from agent_core.agent.session import Session, ThreadState
    from agent_core.proactive.approval_expiry import ApprovalExpiry
    from agent_core.store import keys

    fake_slack.not_member.add("C9")
    thread = ThreadKey("slack", TEAM, "C9", "")
    async with process(slack_settings(valkey, fake_slack), "all") as rt:
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:

            async def command(text: str) -> None:
                form = fake_slack.command("C9", text)
                resp = await fake_slack.deliver(client, form, form=True)
                assert resp.status_code == 200, resp.text

            await command(ASK)
            await wait_until(
                lambda: any("Approval needed" in r["text"] for r in fake_slack.responses),
                what="the private prompt",
            )
            await turn_finished(rt)
            await command("and what else?")
            await wait_until(
                lambda: any("waiting for your" in r["text"] for r in fake_slack.responses),
                what="the held message's notice",
            )
            await turn_finished(rt)
            held_url = fake_slack.responses[-1]["_rid"]  # the held command's own URL
            before = len(fake_slack.responses)
            assert rt.clients is not None and rt.ingest is not None
            timer = ApprovalExpiry(rt.clients.redis, rt.ingest)
            assert await timer.tick(time.time() + 1800 + 2) == 1

            async def idle() -> bool:
                ver, data = await redis.hmget(keys.session(thread), "v", "d")
                s = Session.load(str(thread), int(ver or 0), data)
                return s.state == ThreadState.IDLE and not s.held

            await wait_until(idle, what="the wait to end")
            await turn_finished(rt)
            answers = [r for r in fake_slack.responses[before:] if r["_rid"] == held_url]
            assert answers and "and what else?" in answers[-1]["text"], fake_slack.responses
    assert await demo_runs(redis) == 0
