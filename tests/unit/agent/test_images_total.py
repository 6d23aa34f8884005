"""The photos of one message fit one model request together: an album of large
photos is sent smaller rather than as a request the provider refuses (Anthropic:
32 MB)."""

from __future__ import annotations

import io
import json
import random

import pytest
from PIL import Image

from agent_core.agent.download_budget import DownloadBudget
from agent_core.agent.images import MESSAGE_MAX_B64, fetch_images
from agent_core.events import Attachment
from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.base import ChatMessage, CompletionRequest
from agent_core.llm.prices import PriceTable
from tests.fakes.llm_servers import FakeLLMServer
from tests.unit.llm.conftest import config_for

ANTHROPIC_MAX_REQUEST_BYTES = 32 * 1024 * 1024


def _noisy_png(w: int, h: int, seed: int) -> bytes:
    rnd = random.Random(seed)
    im = Image.frombytes("RGB", (w, h), rnd.randbytes(w * h * 3))
    out = io.BytesIO()
    im.save(out, "PNG")
    return out.getvalue()


class Fetcher:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    async def fetch_attachment(self, att: Attachment, max_bytes: int) -> bytes:
        return self.files[att.ref]


async def test_one_album_of_large_photos_fits_in_one_request() -> None:
    files = {f"f{i}": _noisy_png(1050, 1050, i) for i in range(10)}
    assert all(3_000_000 < len(b) <= 3_750_000 for b in files.values())  # each fine alone
    pics = [
        Attachment("image", f"shot{i}.png", "image/png", len(b), f"f{i}")
        for i, b in enumerate(files.values())
    ]
    images, missing = await fetch_images(Fetcher(files), pics, 10_000_000, "t", DownloadBudget(0))
    assert (len(images), missing) == (10, [])  # all shown, the largest made smaller
    assert sum(len(p.data_b64) for p in images) <= MESSAGE_MAX_B64
    provider = AnthropicProvider(
        config_for(FakeLLMServer(), "anthropic", llm_model="claude-sonnet-4-5"), PriceTable()
    )
    body = provider.build_body(
        CompletionRequest((ChatMessage("user", "what is in these?", images=images),)),
        stream=False,
    )
    assert len(json.dumps(body)) <= ANTHROPIC_MAX_REQUEST_BYTES


async def test_small_photos_are_sent_as_they_are() -> None:
    files = {f"f{i}": _noisy_png(200, 200, i) for i in range(3)}
    pics = [
        Attachment("image", f"s{i}.png", "image/png", len(b), f"f{i}")
        for i, b in enumerate(files.values())
    ]
    images, missing = await fetch_images(Fetcher(files), pics, 10_000_000, "t", DownloadBudget(0))
    assert missing == []
    assert [p.mime for p in images] == ["image/png"] * 3


async def test_what_does_not_fit_even_smaller_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_core.agent import images as images_mod

    files = {f"f{i}": _noisy_png(400, 400, i) for i in range(4)}
    pics = [
        Attachment("image", f"p{i}.png", "image/png", len(b), f"f{i}")
        for i, b in enumerate(files.values())
    ]
    # room for about two of them once made smaller
    monkeypatch.setattr(images_mod, "MESSAGE_MAX_B64", 250_000)
    images, missing = await fetch_images(Fetcher(files), pics, 10_000_000, "t", DownloadBudget(0))
    assert 1 <= len(images) < 4
    assert sum(len(p.data_b64) for p in images) <= 250_000
    assert len(missing) == 4 - len(images)
    assert all("not shown (the photos of one message are too large together)" in m for m in missing)
