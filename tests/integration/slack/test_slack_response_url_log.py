"""A Slack response_url (``https://hooks.slack.com/actions/T…/…/<secret>``, or
``/commands/``) lets whoever holds it post into that channel as the app for 30
minutes.  Parley answers slash commands and ephemeral presses through it (slack_sdk's
AsyncWebhookClient), and slack_sdk logs it at DEBUG ("Sending a request - url: …").
bots/logs.py masked Discord's equivalent but not this one: with LOG_LEVEL=DEBUG the
secret path was written to the log.  The mask is on slack_sdk's logger too, so a
handler other than Parley's (a library's, a test's) gets the record clean."""

from __future__ import annotations

import logging
import socket
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from channels.slack.inbound import SlackInbound
from channels.slack.outbox import SlackOutbox
from channels.url_tokens import SLACK_WEBHOOK_LOGGERS, UrlTokenFilter

SECRET = "AbCdEfGhIjKlMnOpQrStUvWx"


class ToLocalhost(AbstractResolver):
    """Every name resolves to 127.0.0.1: hooks.slack.com is this test's server."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {
                "hostname": host,
                "host": "127.0.0.1",
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": 0,
            }
        ]

    async def close(self) -> None: ...


async def test_a_response_url_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    SlackInbound(None, None, bot_user_id=lambda: "")  # type: ignore[arg-type]  # installs the mask
    app = web.Application()
    seen: list[str] = []

    async def ok(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.Response(text="ok")

    app.router.add_post("/{tail:.*}", ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: Any = runner.addresses[0][1]
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=ToLocalhost()))
    try:
        url = f"http://hooks.slack.com:{port}/actions/T0001/1234567890/{SECRET}"
        with caplog.at_level(logging.DEBUG, logger="slack_sdk"):
            resp = await AsyncWebhookClient(url, session=session).send_dict({"text": "hi"})
    finally:
        await session.close()
        await runner.cleanup()
    assert resp.status_code == 200 and seen == [f"/actions/T0001/1234567890/{SECRET}"]
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("slack_sdk")]
    assert any("Sending a request" in m for m in logged), logged  # slack_sdk did log it
    assert not [m for m in logged if SECRET in m], logged
    assert any(f"hooks.slack.com:{port}/actions/T0001/***" in m for m in logged), logged


@pytest.mark.parametrize("who", ["outbox", "inbound"])
def test_both_users_of_response_urls_install_the_mask(who: str) -> None:
    for name in SLACK_WEBHOOK_LOGGERS:
        logger = logging.getLogger(name)
        logger.filters = [f for f in logger.filters if not isinstance(f, UrlTokenFilter)]
    if who == "outbox":  # slash commands' answers, ephemeral parts
        SlackOutbox(AsyncWebClient(token="xoxb-x"), None, None, None)  # type: ignore[arg-type]
    else:  # "press again" notes
        SlackInbound(None, None, bot_user_id=lambda: "")  # type: ignore[arg-type]
    for name in SLACK_WEBHOOK_LOGGERS:
        assert any(isinstance(f, UrlTokenFilter) for f in logging.getLogger(name).filters)
