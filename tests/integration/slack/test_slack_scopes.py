"""The bot token's scopes: a missing one is named at start and by `parley doctor`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from agent_core.store.embedded import EmbeddedValkey
from bots.ops import doctor
from channels.slack.channel import SlackChannel
from channels.slack.scopes import NEEDED, granted, missing
from channels.slack.settings import SlackSettings
from tests.fakes.llm_servers import FakeLLMServer
from tests.fakes.slack import BOT_TOKEN, MANIFEST_SCOPES, FakeSlack
from tests.integration.slack.conftest import runtime_settings


def test_scopes_are_read_from_the_header() -> None:
    assert granted({"X-OAuth-Scopes": "chat:write, files:read"}) == {"chat:write", "files:read"}
    assert granted({}) is None  # Slack did not say: nothing is reported missing
    assert missing(None) == []
    assert set(NEEDED) <= set(MANIFEST_SCOPES)  # the manifests grant everything needed


async def test_a_missing_scope_is_named_once_at_start(
    fake_slack: FakeSlack,
    channel_factory: Callable[..., SlackChannel],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_slack.scopes -= {"files:read", "users:read"}
    ch = channel_factory()
    with caplog.at_level(logging.WARNING):
        await ch.initialize()
    try:
        assert [m.split(":")[0] for m in ch.missing_scopes] == ["files", "users"]
        assert (
            "files:read: photos, text files, PDFs and Word, Excel or PowerPoint files people post are not read"
            in caplog.text
        )
        assert BOT_TOKEN not in caplog.text
    finally:
        await ch.shutdown()


async def test_a_complete_token_reports_nothing(
    fake_slack: FakeSlack, channel_factory: Callable[..., SlackChannel]
) -> None:
    ch = channel_factory()
    await ch.initialize()
    try:
        assert ch.missing_scopes == []
    finally:
        await ch.shutdown()


async def test_doctor_lists_missing_scopes_and_the_fix(
    valkey: EmbeddedValkey, redis: Any, fake_slack: FakeSlack, slack_settings: SlackSettings
) -> None:
    fake_slack.scopes.discard("reactions:write")
    async with FakeLLMServer() as llm:
        settings = runtime_settings(valkey.url, slack_settings, llm.openai_url)
        checks = {c.name: c for c in await doctor(settings)}
    scopes = checks["slack scopes"]
    assert not scopes.ok and scopes.detail.startswith("reactions:write")
    assert "reinstall" in scopes.fix
    assert checks["slack"].ok
