"""Slack Connect: a channel shared with, and hosted by, another organisation.

There an Events API body's top-level ``team_id`` (and a slash command's form
``team_id``) may name the host organisation, while a button press's ``team.id``
is the workspace Parley is installed in.  Every Slack conversation is keyed by the
installation's workspace (auth.test; an event's ``authorizations[0].team_id``
before that answers), so a press lands in the conversation that asked.  Real
Runtime (worker), real slack_sdk, fake Slack."""

from __future__ import annotations

from typing import Any

import httpx
from redis.asyncio import Redis

from agent_core.store.embedded import EmbeddedValkey
from channels.slack.parse import followup_candidate, parse_event
from tests.fakes.slack import TEAM, FakeSlack
from tests.integration.approvals_e2e.approvals_harness import (
    ASK,
    demo_runs,
    process,
    turn_finished,
    wait_until,
)
from tests.integration.slack.approval_setup import has_buttons, slack_settings

HOST_TEAM = "T0HOSTORG"  # the organisation that owns the shared channel


def _shared(body: dict[str, Any]) -> dict[str, Any]:
    """An event body as Slack sends it in a channel hosted by HOST_TEAM."""
    body["team_id"] = HOST_TEAM
    body["is_ext_shared_channel"] = True
    # authorizations[0].team_id stays TEAM: where the app is installed
    return body


async def test_approve_works_on_a_mentions_prompt_in_a_channel_hosted_elsewhere(
    valkey: EmbeddedValkey, redis: Redis, fake_slack: FakeSlack
) -> None:
    async with process(slack_settings(valkey, fake_slack), "all") as rt:
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:
            body = _shared(fake_slack.message("C1", f"<@UBOT> {ASK}", kind="app_mention"))
            root = body["event"]["ts"]
            assert (await fake_slack.deliver(client, body)).status_code == 200
            prompt = await wait_until(
                lambda: next((m for m in fake_slack.thread("C1", root) if has_buttons(m)), None),
                what="the prompt",
            )
            await turn_finished(rt)
            press = fake_slack.press("C1", prompt.ts, "Approve")  # team.id == TEAM
            assert (await fake_slack.deliver(client, press, form=True)).status_code == 200

            async def ran() -> bool:
                return await demo_runs(redis) == 1

            await wait_until(ran, what="the approved tool to run")
            await turn_finished(rt)
            # a reply in the thread, without a mention, continues the conversation
            more = _shared(fake_slack.message("C1", "thanks, and now?", thread_ts=root))
            assert (await fake_slack.deliver(client, more)).status_code == 200
            await wait_until(
                lambda: len([m for m in fake_slack.thread("C1", root) if m.user == "UBOT"]) >= 3,
                what="the follow-up's answer",
            )
            await turn_finished(rt)
    assert not fake_slack.ephemerals, fake_slack.ephemerals  # "not active any more"


async def test_approve_works_on_a_slash_commands_prompt_whose_form_names_the_host(
    valkey: EmbeddedValkey, redis: Redis, fake_slack: FakeSlack
) -> None:
    async with process(slack_settings(valkey, fake_slack), "all") as rt:
        transport = httpx.ASGITransport(app=rt.web_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://parley") as client:
            form = fake_slack.command("C1", ASK)
            form["team_id"] = HOST_TEAM
            assert (await fake_slack.deliver(client, form, form=True)).status_code == 200
            prompt = await wait_until(
                lambda: next((m for m in fake_slack.thread("C1") if has_buttons(m)), None),
                what="the prompt",
            )
            await turn_finished(rt)
            press = fake_slack.press("C1", prompt.ts, "Approve")  # team.id == TEAM
            assert (await fake_slack.deliver(client, press, form=True)).status_code == 200

            async def ran() -> bool:
                return await demo_runs(redis) == 1

            await wait_until(ran, what="the approved tool to run")
            await turn_finished(rt)
    assert not fake_slack.ephemerals, fake_slack.ephemerals


def test_before_auth_test_answers_an_event_is_keyed_by_its_installation() -> None:
    fake = FakeSlack()
    body = _shared(fake.message("C1", "hi", thread_ts="99.0", channel_type="channel"))
    assert followup_candidate(body) == (TEAM, "C1", "99.0")
    ev = parse_event(body, group_reply="all")
    assert ev is not None and ev.thread.tenant == TEAM
