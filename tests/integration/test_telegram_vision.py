"""A photo sent on Telegram reaches a vision model as an image, fetched on demand."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import httpx

from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from bots.settings import Settings
from channels import telegram as telegram_pkg
from channels.telegram.settings import TelegramSettings
from channels.web.channel import WebSettings
from tests.fakes.llm_servers import FakeLLMServer
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


async def test_photo_reaches_a_vision_model(valkey: EmbeddedValkey, redis: Any) -> None:
    fake = FakeTelegram()
    await fake.start()
    fake.add_file("photo-1", PNG, "image/png")
    async with FakeLLMServer() as llm:
        settings = Settings(
            core=CoreSettings(
                redis_url=valkey.url, public_url="https://p.example", dm_policy="open"
            ),  # type: ignore[arg-type]
            llm=LLMSettings(
                llm_backend="openai_compatible",
                llm_base_url=llm.openai_url,
                llm_model="gpt-4o",
                llm_vision=True,
            ),
            web=WebSettings(web_chat_enabled=False),
            platforms={
                "telegram": TelegramSettings(
                    telegram_bot_token=TOKEN,  # type: ignore[arg-type]
                    telegram_api_base_url=fake.base_url,
                    telegram_webhook_secret=WEBHOOK_SECRET,  # type: ignore[arg-type]
                    telegram_mode="webhook",
                )
            },
            modules={"telegram": telegram_pkg},
        )
        async with Runtime(settings, "all") as rt:
            stop = asyncio.Event()
            task = asyncio.create_task(rt.worker.run(stop))  # type: ignore[union-attr]
            try:
                update = fake.message_update(
                    555,
                    user_id=555,
                    extra={
                        "caption": "what is this?",
                        "photo": [
                            {
                                "file_id": "photo-1",
                                "file_unique_id": "u1",
                                "width": 1,
                                "height": 1,
                                "file_size": len(PNG),
                            }
                        ],
                    },
                )
                async with httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=rt.web_app()), base_url="http://p"
                ) as client:
                    r = await client.post(
                        "/telegram/webhook",
                        json=update,
                        headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
                    )
                    assert r.status_code == 200
                deadline = time.monotonic() + 10
                while not llm.requests and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            finally:
                stop.set()
                await task
        body = llm.requests[-1].body
        content = body["messages"][-1]["content"]
        assert isinstance(content, list), content
        urls = [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]
        assert urls == ["data:image/png;base64," + base64.b64encode(PNG).decode()] or urls == [
            "data:image/jpeg;base64," + base64.b64encode(PNG).decode()
        ]
    await fake.stop()
