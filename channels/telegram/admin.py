"""Webhook administration for ``parley telegram set-webhook | delete-webhook |
webhook-info`` and the release phase.  Each returns a printable string and
raises ConfigError (one line) on a bad token or missing setting."""

from __future__ import annotations

from telegram import Bot
from telegram.error import TelegramError

from agent_core.errors import ConfigError
from channels.telegram.channel import check_bot, make_bot
from channels.telegram.polling import ALLOWED_UPDATES
from channels.telegram.settings import TelegramSettings
from channels.telegram.webhook import PATH


def webhook_url(public_url: str) -> str:
    return public_url.rstrip("/") + PATH


async def _bot(settings: TelegramSettings) -> Bot:
    if settings.telegram_bot_token is None:
        raise ConfigError(["TELEGRAM_BOT_TOKEN: not set"])
    bot = make_bot(settings, pool_size=2)
    try:
        await check_bot(bot, attempts=1)
    except BaseException:
        await bot.shutdown()  # close the HTTP session getMe opened
        raise
    return bot


async def set_webhook(
    settings: TelegramSettings, public_url: str, *, drop_pending_updates: bool = False
) -> str:
    if not public_url.startswith("https://") and not public_url.startswith("http://127."):
        raise ConfigError(["PUBLIC_URL: must be an https:// URL for a Telegram webhook"])
    secret = settings.telegram_webhook_secret
    if secret is None:
        raise ConfigError(["TELEGRAM_WEBHOOK_SECRET: required to set the webhook"])
    url = webhook_url(public_url)
    bot = await _bot(settings)
    try:
        await bot.set_webhook(
            url,
            secret_token=secret.get_secret_value(),
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=drop_pending_updates,
        )
    except TelegramError as exc:
        raise ConfigError([f"setWebhook failed: {exc.message}"]) from None
    finally:
        await bot.shutdown()
    return f"Telegram webhook set: @{bot.username} -> {url}"


async def delete_webhook(settings: TelegramSettings, *, drop_pending_updates: bool = False) -> str:
    bot = await _bot(settings)
    try:
        await bot.delete_webhook(drop_pending_updates=drop_pending_updates)
    except TelegramError as exc:
        raise ConfigError([f"deleteWebhook failed: {exc.message}"]) from None
    finally:
        await bot.shutdown()
    return f"Telegram webhook deleted for @{bot.username}; polling can be used now"


async def webhook_info(settings: TelegramSettings) -> str:
    bot = await _bot(settings)
    try:
        info = await bot.get_webhook_info()
    except TelegramError as exc:
        raise ConfigError([f"getWebhookInfo failed: {exc.message}"]) from None
    finally:
        await bot.shutdown()
    lines = [
        f"bot:              @{bot.username} ({bot.id})",
        f"webhook url:      {info.url or '(none: polling mode)'}",
        f"pending updates:  {info.pending_update_count}",
    ]
    if info.max_connections:
        lines.append(f"max connections:  {info.max_connections}")
    if info.allowed_updates:
        lines.append(f"allowed updates:  {', '.join(info.allowed_updates)}")
    if info.last_error_date:
        lines.append(
            f"last error:       {info.last_error_date:%Y-%m-%d %H:%M:%S} "
            f"{info.last_error_message or ''}".rstrip()
        )
    return "\n".join(lines)
