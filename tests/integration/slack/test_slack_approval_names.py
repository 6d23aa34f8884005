"""Who an approval's texts name in Slack.  Slack's message and app_mention events
carry only the member id, so the texts that name a person (the closed prompt's
"Approved by …", "Only … can decide this.", "⏳ I'm waiting for …'s decision")
take the name Slack shows (users.info, the lookup the model's input uses), never
the raw id.  Real Runtime (worker), real slack_sdk, fake Slack."""

from __future__ import annotations

import httpx
from redis.asyncio import Redis

from agent_core.store.embedded import EmbeddedValkey
from tests.fakes.slack import FakeSlack, Message
from tests.integration.approvals_e2e.approvals_harness import (
    ASK,
    demo_runs,
    process,
    turn_finished,
    wait_until,
)
from tests.integration.slack.approval_setup import has_buttons, slack_settings


async def _ask(fake: FakeSlack, client: httpx.AsyncClient) -> tuple[str, Message]:
    """Ann mentions Parley with a request that needs approval: the thread, its prompt."""
    body = fake.message("C1", f"<@UBOT> {ASK}", kind="app_mention")
    root = str(body["event"]["ts"])
    assert (await fake.deliver(client, body)).status_code == 200
    prompt = await wait_until(
        lambda: next((m for m in fake.thread("C1", root) if has_buttons(m)), None),
        what="the prompt",
    )
    return root, prompt


async def test_a_typed_yes_closes_the_prompt_with_the_deciders_name(
    valkey: EmbeddedValkey, redis: Redis, fake_slack: FakeSlack
) -> None:
    fake_slack.add_user("U1", "Ann Smith", "Annie")
    async with process(slack_settings(valkey, fake_slack), "all") as rt:
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:
            root, prompt = await _ask(fake_slack, client)
            await turn_finished(rt)
            yes = fake_slack.message("C1", "yes", thread_ts=root)  # no profile in it
            assert (await fake_slack.deliver(client, yes)).status_code == 200

            async def ran() -> bool:
                return await demo_runs(redis) == 1

            await wait_until(ran, what="the approved tool to run")
            await turn_finished(rt)
    closed = fake_slack.messages[("C1", prompt.ts)]
    assert "Approved by Annie at" in closed.text, closed.text


async def test_someone_elses_press_is_told_the_requesters_name(
    valkey: EmbeddedValkey, redis: Redis, fake_slack: FakeSlack
) -> None:
    fake_slack.add_user("U1", "Ann Smith", "Annie")
    fake_slack.add_user("U2", "Bob Jones", "Bob")
    async with process(slack_settings(valkey, fake_slack), "all") as rt:
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:
            _, prompt = await _ask(fake_slack, client)
            await turn_finished(rt)
            press = fake_slack.press("C1", prompt.ts, "Approve", user="U2")
            assert (await fake_slack.deliver(client, press, form=True)).status_code == 200
            (notice,) = await wait_until(
                lambda: [e["text"] for e in fake_slack.ephemerals if e["user"] == "U2"],
                what="Bob's notice",
            )
    assert "Only Annie or an approver can decide this." in notice, notice
    assert await demo_runs(redis) == 0


async def test_the_waiting_notice_names_whose_decision_it_is(
    valkey: EmbeddedValkey, redis: Redis, fake_slack: FakeSlack
) -> None:
    fake_slack.add_user("U1", "Ann Smith", "Annie")
    fake_slack.add_user("U2", "Bob Jones", "Bob")
    async with process(slack_settings(valkey, fake_slack), "all") as rt:
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:
            root, _ = await _ask(fake_slack, client)
            await turn_finished(rt)
            bob = fake_slack.message("C1", "and the logs?", user="U2", thread_ts=root)
            assert (await fake_slack.deliver(client, bob)).status_code == 200
            notice = await wait_until(
                lambda: next((m for m in fake_slack.thread("C1", root) if "⏳" in m.text), None),
                what="the waiting notice",
            )
            await turn_finished(rt)
    assert "waiting for Annie's decision" in notice.text, notice.text
