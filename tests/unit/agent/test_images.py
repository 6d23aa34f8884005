"""The photos of a message as a vision model gets them (agent_core/agent/images.py)."""

from __future__ import annotations

import base64

import pytest

from agent_core.agent.images import fetch_images, image_mime
from agent_core.errors import SendFailed
from agent_core.events import Attachment

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 20
JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 20
GIF = b"GIF89a" + b"\0" * 20
WEBP = b"RIFF\x10\0\0\0WEBPVP8 " + b"\0" * 10
HEIC = b"\0\0\0\x18ftypheic" + b"\0" * 20
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"></svg>'


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (PNG, "image/png"),
        (JPEG, "image/jpeg"),
        (GIF, "image/gif"),
        (WEBP, "image/webp"),
        (HEIC, None),
        (SVG, None),
        (b"", None),
    ],
)
def test_image_type_is_read_from_the_bytes(data: bytes, mime: str | None) -> None:
    assert image_mime(data) == mime


class Files:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.asked: list[str] = []

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        self.asked.append(attachment.ref)
        data = self.files.get(attachment.ref)
        if data is None:
            raise SendFailed("the file host answered HTTP 404")
        return data


async def test_each_photo_is_shown_or_named_with_the_reason() -> None:
    files = Files({"a": PNG, "b": HEIC, "c": JPEG * 100, "e": JPEG})
    pics = [
        Attachment("image", "a.png", "image/jpeg", 0, "a"),  # label wrong: bytes win
        Attachment("image", "b.heic", "image/heic", len(HEIC), "b"),
        Attachment("image", "c.jpg", "image/jpeg", 0, "c"),  # size unknown, too large
        Attachment("image", "d.png", "image/png", 0, "d"),  # gone
        Attachment("image", "big.png", "image/png", 10_000, "big"),  # declared too large
        Attachment("image", "", "image/jpeg", 0, "e"),
    ]
    images, missing = await fetch_images(files, pics, 1000, "t")
    assert [i.mime for i in images] == ["image/png", "image/jpeg"]
    assert base64.b64decode(images[0].data_b64) == PNG
    assert missing == [
        "b.heic: not a JPEG, PNG, GIF or WebP image",
        "c.jpg: larger than 1000 bytes",
        "d.png: could not be downloaded",
        "big.png: larger than 1000 bytes",
    ]
    assert "big" not in files.asked  # never downloaded
