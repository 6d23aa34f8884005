"""Settings for a whole Parley runtime with Telegram in webhook mode against the fake
Bot API (web chat off), shared by the Telegram end-to-end tests."""

from __future__ import annotations

from typing import Any

from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings
from bots.settings import Settings
from channels import telegram as telegram_pkg
from channels.telegram.settings import TelegramSettings
from channels.web.channel import WebSettings
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram


def telegram_settings(
    redis_url: str,
    fake: FakeTelegram,
    llm: LLMSettings | None = None,
    *,
    core: dict[str, Any] | None = None,
    **telegram: Any,
) -> Settings:
    """``core`` adds to / overrides the core settings, ``telegram`` the channel's."""
    return Settings(
        core=CoreSettings(
            **{
                "redis_url": redis_url,
                "public_url": "https://parley.example",
                "dm_policy": "open",
                "group_policy": "open",
                **(core or {}),
            }
        ),
        llm=llm or LLMSettings(llm_backend="demo"),
        web=WebSettings(web_chat_enabled=False),
        platforms={
            "telegram": TelegramSettings(
                **{
                    "telegram_bot_token": TOKEN,
                    "telegram_api_base_url": fake.base_url,
                    "telegram_webhook_secret": WEBHOOK_SECRET,
                    "telegram_mode": "webhook",
                    **telegram,
                }
            )
        },
        modules={"telegram": telegram_pkg},
    )
