"""People's names in a Slack channel conversation (users.info, cached)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agent_core.store.embedded import EmbeddedValkey
from channels.slack.channel import SlackChannel
from channels.slack.outbox import SlackOutbox
from channels.slack.settings import SlackSettings
from tests.fakes.llm_servers import FakeLLMServer
from tests.fakes.slack import FakeSlack
from tests.integration.slack.conftest import runtime_settings, serving


def _outbox(slack: SlackChannel) -> SlackOutbox:
    box = slack.outbox()
    assert isinstance(box, SlackOutbox)
    return box


async def test_names_are_looked_up_once_and_fall_back_sensibly(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    fake_slack.add_user("U1", "Alice Smith", "alice")
    fake_slack.add_user("U2", "Bob Jones")  # never set a display name
    box = _outbox(slack)
    assert await box.user_display_name("U1") == "alice"
    assert await box.user_display_name("U2") == "Bob Jones"
    assert await box.user_display_name("U1") == "alice"
    assert await box.user_display_name("U9") == ""  # user_not_found: no name, no error
    assert await box.user_display_name("U9") == ""
    asked = [c.args.get("user") for c in fake_slack.calls_to("users.info", ok=None)]
    assert asked == ["U1", "U2", "U9"]  # each person once (a miss too, for a while)


async def test_a_mention_without_a_profile_reaches_the_model_with_the_name(
    valkey: EmbeddedValkey, redis: Any, fake_slack: FakeSlack, slack_settings: SlackSettings
) -> None:
    """Slack's app_mention has only the user id: the model still reads who said it."""
    fake_slack.add_user("U1", "Alice Smith", "alice")
    async with FakeLLMServer() as llm:
        settings = runtime_settings(valkey.url, slack_settings, llm.openai_url)
        async with serving(settings) as client:
            body = fake_slack.message("C1", "<@UBOT> what do you think?", kind="app_mention")
            root = body["event"]["ts"]
            assert (await fake_slack.deliver(client, body)).status_code == 200
            deadline = time.monotonic() + 10
            while not fake_slack.thread("C1", root):
                assert time.monotonic() < deadline, "no answer in Slack"
                await asyncio.sleep(0.05)
        turn = llm.requests[0].body["messages"][-1]
    assert turn["role"] == "user"
    assert turn["content"] == "alice: what do you think?"


async def test_a_slash_command_reaches_the_model_with_the_shown_name_not_the_handle(
    valkey: EmbeddedValkey, redis: Any, fake_slack: FakeSlack, slack_settings: SlackSettings
) -> None:
    """A /parley form carries ``user_name``, Slack's legacy handle: not what Slack
    shows, so the display name is looked up as for a mention without a profile."""
    fake_slack.add_user("U1", "Alice Smith", "Ally")
    async with FakeLLMServer() as llm:
        settings = runtime_settings(valkey.url, slack_settings, llm.openai_url)
        async with serving(settings) as client:
            form = fake_slack.command("C1", "what is up?")
            form["user_name"] = "alice.smith"  # the legacy handle
            assert (await fake_slack.deliver(client, form, form=True)).status_code == 200
            deadline = time.monotonic() + 10
            while not llm.requests:
                assert time.monotonic() < deadline, "the model was not asked"
                await asyncio.sleep(0.05)
        turn = llm.requests[0].body["messages"][-1]
    assert turn["content"] == "Ally: what is up?"


async def test_a_slow_lookup_is_remembered_as_a_miss(
    fake_slack: FakeSlack, slack: SlackChannel, monkeypatch: Any
) -> None:
    from channels.slack import people

    monkeypatch.setattr(people, "LOOKUP_SECS", 0.1)
    fake_slack.add_user("U1", "Alice Smith", "alice")
    fake_slack.stall["users.info"] = 1.0
    box = _outbox(slack)
    assert await box.user_display_name("U1") == ""
    assert await box.user_display_name("U1") == ""  # not asked again, not waited for
    assert len(fake_slack.calls_to("users.info", ok=None)) == 1


async def test_people_mentioned_by_id_are_named_from_the_same_cache(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    fake_slack.add_user("U01ALICE1", "Alice Smith", "alice")
    fake_slack.add_user("U02BOB234", "Bob Jones")
    box = _outbox(slack)
    text = "ask @U01ALICE1 and @U02BOB234, cc @U01ALICE1 and @W09NOBODY1 (mail me@U01ALICE1)"
    assert await box.name_mentions(text) == (
        "ask @alice and @Bob Jones, cc @alice and @W09NOBODY1 (mail me@U01ALICE1)"
    )
    assert await box.name_mentions("no one here, @U01ALICE1x or @u01alice1") == (
        "no one here, @U01ALICE1x or @u01alice1"
    )
    assert await box.user_display_name("U01ALICE1") == "alice"  # cached by the mention
    asked = [c.args.get("user") for c in fake_slack.calls_to("users.info", ok=None)]
    assert asked == ["U01ALICE1", "U02BOB234", "W09NOBODY1"]  # each once


async def test_a_message_mentioning_people_reaches_the_model_with_their_names(
    valkey: EmbeddedValkey, redis: Any, fake_slack: FakeSlack, slack_settings: SlackSettings
) -> None:
    """Slack writes mentions as <@U…>; the model reads names, in a channel and a DM."""
    fake_slack.add_user("U1", "Alice Smith", "alice")
    fake_slack.add_user("U02BOB234", "Bob Jones")
    async with FakeLLMServer() as llm:
        settings = runtime_settings(valkey.url, slack_settings, llm.openai_url, dm_policy="open")
        async with serving(settings) as client:
            for channel, text, kind in (
                ("C1", "<@UBOT> what does <@U02BOB234> think?", "app_mention"),
                ("D1", "tell <@U02BOB234|bob> hi", "message"),
            ):
                body = fake_slack.message(channel, text, kind=kind)
                assert (await fake_slack.deliver(client, body)).status_code == 200
            deadline = time.monotonic() + 10
            while len(llm.requests) < 2:
                assert time.monotonic() < deadline, "the model was not asked twice"
                await asyncio.sleep(0.05)
    said = [r.body["messages"][-1]["content"] for r in llm.requests]
    assert sorted(said) == ["alice: what does @Bob Jones think?", "tell @bob hi"]
