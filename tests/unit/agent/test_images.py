"""The photos of a message as a vision model gets them (agent_core/agent/images.py)."""

from __future__ import annotations

import asyncio
import base64
import io
import os

import pytest
from PIL import Image

from agent_core.agent import images
from agent_core.agent.download_budget import DownloadBudget
from agent_core.agent.images import SEND_MAX_BYTES, fetch_images, image_mime, prepare
from agent_core.errors import SendFailed
from agent_core.events import Attachment


def encode(im: Image.Image, fmt: str, **kw: object) -> bytes:
    out = io.BytesIO()
    im.save(out, fmt, **kw)
    return out.getvalue()


def noise(w: int, h: int, mode: str = "RGB") -> Image.Image:
    """Random pixels: JPEG cannot make them small, like a detailed photo."""
    return Image.frombytes(mode, (w, h), os.urandom(w * h * len(mode)))


PNG = encode(Image.new("RGB", (4, 3), "red"), "PNG")
JPEG = encode(Image.new("RGB", (4, 3), "blue"), "JPEG")
WEBP = encode(Image.new("RGB", (4, 3), "green"), "WEBP")
HEIC = b"\0\0\0\x18ftypheic" + b"\0" * 20
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"></svg>'


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (PNG, "image/png"),
        (JPEG, "image/jpeg"),
        (b"GIF89a" + b"\0" * 20, "image/gif"),
        (WEBP, "image/webp"),
        (HEIC, None),
        (SVG, None),
        (b"", None),
    ],
)
def test_image_type_is_read_from_the_bytes(data: bytes, mime: str | None) -> None:
    assert image_mime(data) == mime


def test_small_images_go_as_they_are() -> None:
    for data, mime in ((PNG, "image/png"), (JPEG, "image/jpeg"), (WEBP, "image/webp")):
        assert prepare(data) == (mime, data)


def test_a_large_photo_is_scaled_down_upright_under_anthropics_limit() -> None:
    """A 4000x3000 phone photo of ~6 MB, rotated by EXIF (orientation 6: turn 90°)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encode(noise(4000, 3000), "JPEG", quality=95, exif=exif)
    assert len(data) > SEND_MAX_BYTES
    ready = prepare(data)
    assert not isinstance(ready, str), ready
    mime, out = ready
    assert mime == "image/jpeg" and len(out) <= SEND_MAX_BYTES
    assert len(base64.b64encode(out)) <= 5 * 1024 * 1024  # Anthropic counts the base64
    with Image.open(io.BytesIO(out)) as im:
        assert im.size == (1176, 1568)  # portrait now: upright, long side 1568


def test_transparency_stays_png_and_gifs_become_png() -> None:
    long = encode(Image.new("RGBA", (9000, 300), (255, 0, 0, 128)), "PNG")
    mime, out = prepare(long)  # type: ignore[misc]
    assert mime == "image/png"
    with Image.open(io.BytesIO(out)) as im:
        assert im.mode == "RGBA" and max(im.size) == 1568
    # a PNG too large even scaled down goes as a JPEG, on white
    big = encode(noise(2200, 2200, "RGBA"), "PNG")
    mime, out = prepare(big)  # type: ignore[misc]
    assert mime == "image/jpeg" and len(out) <= SEND_MAX_BYTES
    frames = [Image.new("P", (10, 10), i) for i in (1, 2)]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:])
    mime, out = prepare(gif.getvalue())  # type: ignore[misc]
    assert mime == "image/png" and image_mime(out) == "image/png"


def test_what_cannot_be_shown_says_why() -> None:
    assert prepare(HEIC) == "not a JPEG, PNG, GIF or WebP image"
    assert prepare(b"\xff\xd8\xff" + b"junk" * 10) == "could not be read as an image"
    bomb = encode(Image.new("1", (9000, 9000)), "PNG")  # 81 MP in a few KB
    assert len(bomb) < 100_000
    assert prepare(bomb) == "more than 16 million pixels"  # decoded whole: 324 MB
    wide_bomb = encode(Image.new("1", (12000, 4999)), "PNG")  # 60 MP: would be 240 MB
    assert prepare(wide_bomb) == "more than 16 million pixels"
    wide = encode(Image.new("L", (9000, 10)), "PNG")  # small file, a side the APIs refuse
    _, out = prepare(wide)  # type: ignore[misc]
    with Image.open(io.BytesIO(out)) as im:
        assert max(im.size) == 1568


class Files:
    def __init__(self, files: dict[str, bytes], slow: frozenset[str] = frozenset()) -> None:
        self.files = files
        self.slow = slow
        self.asked: list[str] = []

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        self.asked.append(attachment.ref)
        if attachment.ref in self.slow:
            await asyncio.sleep(60)
        data = self.files.get(attachment.ref)
        if data is None:
            raise SendFailed("the file host answered HTTP 404")
        return data


async def test_each_photo_is_shown_or_named_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(images, "FETCH_DEADLINE_SECS", 0.5)
    files = Files({"a": PNG, "b": HEIC, "c": JPEG * 100, "e": JPEG}, slow=frozenset({"f"}))
    pics = [
        Attachment("image", "a.png", "image/jpeg", 0, "a"),  # label wrong: bytes win
        Attachment("image", "b.heic", "image/heic", len(HEIC), "b"),
        Attachment("image", "c.jpg", "image/jpeg", 0, "c"),  # size unknown, too large
        Attachment("image", "d.png", "image/png", 0, "d"),  # gone
        Attachment("image", "big.png", "image/png", 10_000, "big"),  # declared too large
        Attachment("image", "", "image/jpeg", 0, "e"),
        Attachment("image", "slow.jpg", "image/jpeg", 0, "f"),
    ]
    budget = DownloadBudget(100_000)
    shown, missing = await fetch_images(files, pics, 1000, "t", budget)
    assert [i.mime for i in shown] == ["image/png", "image/jpeg"]
    assert base64.b64decode(shown[0].data_b64) == PNG
    assert missing == [
        "b.heic: not a JPEG, PNG, GIF or WebP image",
        "c.jpg: larger than 1000 bytes",
        "d.png: could not be downloaded",
        "big.png: larger than 1000 bytes",
        "slow.jpg: not downloaded in time",
    ]
    assert "big" not in files.asked  # never downloaded


def test_16_bit_grey_is_scaled_to_8_bits_not_clipped_white() -> None:
    ramp = Image.linear_gradient("L").resize((9000, 1000)).convert("I")
    ramp = ramp.point(lambda v: v * 257)  # 0..65535
    data = encode(ramp.convert("I;16"), "PNG")  # a side over 8000 px: re-encoded
    _, out = prepare(data)  # type: ignore[misc]
    with Image.open(io.BytesIO(out)) as im:
        hist = im.convert("L").histogram()
    white = sum(hist[250:]) / sum(hist)
    assert white < 0.1, white
