"""A photo sent on Telegram reaches a vision model as an image, fetched on demand."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import httpx

from agent_core.llm.settings import LLMSettings
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from bots.settings import Settings
from tests.fakes.llm_servers import FakeLLMServer
from tests.fakes.telegram import WEBHOOK_SECRET, FakeTelegram
from tests.integration.conftest import serving
from tests.integration.telegram_runtime import telegram_settings

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _settings(valkey: EmbeddedValkey, fake: FakeTelegram, llm: FakeLLMServer) -> Settings:
    return telegram_settings(
        valkey.url,
        fake,
        LLMSettings(
            llm_backend="openai_compatible",
            llm_base_url=llm.openai_url,
            llm_model="gpt-4o",
            llm_vision=True,
        ),
        core={"public_url": "https://p.example"},
    )


def _photo(fid: str) -> dict[str, Any]:
    size = {"file_id": fid, "file_unique_id": fid + "u", "width": 1, "height": 1}
    return {"photo": [size | {"file_size": len(PNG)}]}


async def test_photo_reaches_a_vision_model(valkey: EmbeddedValkey, redis: Any) -> None:
    fake = FakeTelegram()
    await fake.start()
    fake.add_file("photo-1", PNG, "image/png")
    async with FakeLLMServer() as llm:
        async with Runtime(_settings(valkey, fake, llm), "all") as rt:
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


async def test_an_album_is_answered_once_with_all_its_photos(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """Telegram delivers an album as one update per photo, here 0.2 s apart, the
    later ones after the first one's turn has started: the model is asked once,
    with every photo, and answers once."""
    fake = FakeTelegram()
    await fake.start()
    for fid in ("a1", "a2", "a3"):
        fake.add_file(fid, PNG, "image/png")
    album = {"media_group_id": "13700000000000001"}
    async with FakeLLMServer() as llm:
        async with serving(_settings(valkey, fake, llm)) as client:

            async def deliver(update: dict[str, Any]) -> None:
                r = await client.post(
                    "/telegram/webhook",
                    json=update,
                    headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
                )
                assert r.status_code == 200

            async def answers(n: int) -> None:
                deadline = time.monotonic() + 15
                while len(fake.sent_texts(555)) < n and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)

            extra = album | _photo("a1") | {"caption": "which is sharper?"}
            await deliver(fake.message_update(555, user_id=555, extra=extra))
            for fid in ("a2", "a3"):
                await asyncio.sleep(0.2)
                await deliver(fake.message_update(555, user_id=555, extra=album | _photo(fid)))
            await answers(1)
            # a later message: once it is answered, every album item was handled
            await deliver(fake.message_update(555, "thanks", user_id=555))
            await answers(2)
        assert len(fake.sent_texts(555)) == 2, fake.sent_texts(555)
        first = llm.requests[0].body["messages"]
        images = [
            p
            for m in first
            if isinstance(m["content"], list)
            for p in m["content"]
            if p.get("type") == "image_url"
        ]
        assert len(images) == 3, first
        assert len(llm.requests) == 2
    await fake.stop()
