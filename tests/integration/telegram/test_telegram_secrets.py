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
