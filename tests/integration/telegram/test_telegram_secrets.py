"""Telegram secrets: the bot token never reaches an error a chat can be shown, and
a webhook secret with surrounding whitespace is cleaned before Telegram sees it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from agent_core.errors import ChannelError, ConfigError
from agent_core.events import OutboundMessage, ThreadKey
from agent_core.store.pacing import Pacer
from channels.telegram import admin
from channels.telegram.channel import make_bot
from channels.telegram.sender import TelegramOutbox
from channels.telegram.settings import TelegramSettings
from tests.fakes.telegram import TOKEN
from tests.integration.telegram.conftest import make_settings


@pytest.fixture
async def garbled_api() -> AsyncIterator[str]:
    """A Bot API endpoint that answers with a malformed HTTP response (a broken
    proxy / middlebox / self-hosted Bot API server in trouble)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nBad Header\r\n\r\n{}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/bot"
    server.close()
    await server.wait_closed()


async def test_send_failure_never_carries_the_bot_token(redis: Redis, garbled_api: str) -> None:
    settings = TelegramSettings(telegram_bot_token=TOKEN, telegram_api_base_url=garbled_api)
    bot = make_bot(settings)
    outbox = TelegramOutbox(bot, Pacer(redis), settings.bot_id)
    secret_part = TOKEN.split(":", 1)[1]
    try:
        with pytest.raises(ChannelError) as caught:
            await outbox.send(ThreadKey("telegram", "123456", "42"), OutboundMessage("hi"))
        # what a routine / heartbeat records and /routine, /heartbeat show in the chat
        outcome = f"error: {type(caught.value).__name__}: {str(caught.value)[:200]}"
        assert secret_part not in str(caught.value), str(caught.value)
        assert secret_part not in outcome
    finally:
        await outbox.close()
        await bot.shutdown()


async def test_webhook_secret_with_trailing_newline_is_refused_or_cleaned(fake: Any) -> None:
    """A secret passed through the environment with a trailing newline (e.g. a
    Kubernetes secret made from a file) passes validation unchanged, because the
    regex's ``$`` matches before a final "\\n"; then ``parley release`` / set-webhook
    fails with Telegram's "Secret token contains unallowed characters"."""
    try:
        settings = make_settings(fake, telegram_webhook_secret="s3cret_-TOKEN\n")
    except (ValueError, ConfigError):
        return  # refused at start with the settings line: fine
    secret = settings.telegram_webhook_secret
    assert secret is not None
    assert "\n" not in secret.get_secret_value(), "kept a newline Telegram refuses"
    await admin.set_webhook(settings, "https://parley.example")


@pytest.mark.parametrize(("secret", "warned"), [("Q", True), ("Q" * 15, True), ("Q" * 16, False)])
async def test_short_webhook_secret_warns_at_start(
    fake: Any, redis: Redis, caplog: pytest.LogCaptureFixture, secret: str, warned: bool
) -> None:
    """A 1-character TELEGRAM_WEBHOOK_SECRET was accepted without a word (as a short
    WEB_CHAT_TOKEN is not): below 16 characters the start-up log says so."""
    import logging

    from tests.integration.telegram.conftest import make_channel

    with caplog.at_level(logging.WARNING, logger="channels.telegram.channel"):
        ch = await make_channel(fake, redis, telegram_webhook_secret=secret)
    await ch.shutdown()
    assert ch.mode == "webhook"
    lines = [r.getMessage() for r in caplog.records if "TELEGRAM_WEBHOOK_SECRET" in r.getMessage()]
    if warned:
        assert lines == [
            f"TELEGRAM_WEBHOOK_SECRET is {len(secret)} characters long: use at least 16 random "
            "ones (e.g. openssl rand -hex 32); anyone who guesses it can post updates as any user"
        ]
        assert secret not in lines[0].replace("TELEGRAM_WEBHOOK_SECRET", "")  # never the value
    else:
        assert lines == []
