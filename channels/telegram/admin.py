"""Webhook administration for ``parley telegram set-webhook | delete-webhook |
webhook-info`` and the release phase.  Each returns a printable string and
raises ConfigError (one line) on a bad token or missing setting."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from telegram import Bot
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from agent_core.errors import ConfigError
from channels.telegram.channel import (
    TelegramUnreachable,
    check_bot,
    make_bot,
    retry_after_secs,
)
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
    except BadRequest as exc:  # a NetworkError to the library, a refusal to us
        raise ConfigError([f"setWebhook failed: {exc.message}"]) from None
    except (RetryAfter, NetworkError) as exc:  # flood control, timeouts, 5xx
        raise _unreachable("setWebhook", exc, bot) from None
    except TelegramError as exc:
        raise ConfigError([f"setWebhook failed: {exc.message}"]) from None
    finally:
        await bot.shutdown()
    return f"Telegram webhook set: @{bot.username} -> {url}"


async def delete_webhook(settings: TelegramSettings, *, drop_pending_updates: bool = False) -> str:
    bot = await _bot(settings)
    try:
        await bot.delete_webhook(drop_pending_updates=drop_pending_updates)
    except BadRequest as exc:  # a NetworkError to the library, a refusal to us
        raise ConfigError([f"deleteWebhook failed: {exc.message}"]) from None
    except (RetryAfter, NetworkError) as exc:  # flood control, timeouts, 5xx
        raise _unreachable("deleteWebhook", exc, bot) from None
    except TelegramError as exc:
        raise ConfigError([f"deleteWebhook failed: {exc.message}"]) from None
    finally:
        await bot.shutdown()
    return f"Telegram webhook deleted for @{bot.username}; polling can be used now"


def _unreachable(method: str, exc: RetryAfter | NetworkError, bot: Bot) -> TelegramUnreachable:
    """A call that met flood control or the network: a warning for the release
    phase (the dynos start anyway), not a rejected setting."""
    if isinstance(exc, RetryAfter):
        why = f"rate limited by Telegram (429; retry in {retry_after_secs(exc):g} s)"
    else:
        why = f"could not reach Telegram ({type(exc).__name__}: {exc.message})"
    why = why.replace(bot.token, "<token>")
    return TelegramUnreachable([f"{method}: {why}; nothing was changed at Telegram"])


@dataclass(frozen=True)
class WebhookStatus:
    """getWebhookInfo, as doctor and the release phase read it."""

    bot: str  # "@name (id)"
    url: str  # "" when none is set (polling)
    pending_update_count: int
    last_error_date: datetime | None = None  # timezone-aware (UTC)
    last_error_message: str = ""
    max_connections: int | None = None
    allowed_updates: tuple[str, ...] = ()

    def last_error_age_secs(self, now: datetime | None = None) -> float | None:
        if self.last_error_date is None:
            return None
        when = self.last_error_date
        if when.tzinfo is None:  # Telegram sends Unix time (UTC)
            when = when.replace(tzinfo=UTC)
        return ((now or datetime.now(UTC)) - when).total_seconds()


async def webhook_status(settings: TelegramSettings) -> WebhookStatus:
    bot = await _bot(settings)
    try:
        info = await bot.get_webhook_info()
    except BadRequest as exc:  # a NetworkError to the library, a refusal to us
        raise ConfigError([f"getWebhookInfo failed: {exc.message}"]) from None
    except (RetryAfter, NetworkError) as exc:  # flood control, timeouts, 5xx
        raise _unreachable("getWebhookInfo", exc, bot) from None
    except TelegramError as exc:
        raise ConfigError([f"getWebhookInfo failed: {exc.message}"]) from None
    finally:
        await bot.shutdown()
    return WebhookStatus(
        bot=f"@{bot.username} ({bot.id})",
        url=info.url or "",
        pending_update_count=info.pending_update_count,
        last_error_date=info.last_error_date,
        last_error_message=info.last_error_message or "",
        max_connections=info.max_connections,
        allowed_updates=tuple(info.allowed_updates or ()),
    )


async def webhook_info(settings: TelegramSettings) -> str:
    info = await webhook_status(settings)
    lines = [
        f"bot:              {info.bot}",
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
            f"{info.last_error_message}".rstrip()
        )
    return "\n".join(lines)
