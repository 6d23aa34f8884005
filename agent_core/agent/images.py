"""The photos of a user's message, for a vision model.

Fetched on demand through the channel's outbox (the optional
:class:`AttachmentFetcher`), up to ``MAX_ATTACHMENT_BYTES`` each, all photos of a
message at once and within :data:`FETCH_DEADLINE_SECS` together.

What is sent is what every backend accepts, read from the bytes rather than the
platform's label (the model APIs refuse a request whose label does not match the
data, and that fails the whole turn):

* JPEG, PNG and WebP up to :data:`SEND_MAX_BYTES` and :data:`MAX_SIDE` pixels a
  side go as they are;
* larger ones are scaled down to :data:`MAX_EDGE` pixels on the long side and sent
  as JPEG (PNG when they have transparency), turned upright by their EXIF
  orientation: Anthropic refuses an image whose base64 text is over 5 MB, which
  is 3.75 MB of file, and a phone photo is often larger (a PNG still too large
  goes as JPEG, on white);
* a GIF goes as a PNG of its first frame (some OpenAI-compatible backends refuse
  GIFs, and none reads past the first frame);
* anything else (HEIC, SVG, a file that is not an image) is not shown.

A photo that cannot be shown is named to the model with the reason, so it does
not answer as if it had seen it.  Decoding runs on one thread of its own per
process, so a burst of photos blocks neither the event loop nor the default
executor, and one decode at a time bounds the memory it takes.  The downloaded
bytes count against the process's :class:`~agent_core.agent.download_budget.DownloadBudget`
from before the download until the photo is prepared; a photo still waiting for
its share at the deadline is named as such.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, runtime_checkable

from PIL import Image, ImageOps

from agent_core.agent.download_budget import DownloadBudget, Hold
from agent_core.events import Attachment
from agent_core.llm.base import ImagePart

log = logging.getLogger(__name__)

SEND_MAX_BYTES = 3_750_000  # 5,000,000 characters of base64: under Anthropic's 5 MiB
MAX_EDGE = 1568  # the long side the model APIs scale larger images down to anyway
# More is refused undecoded (a decompression bomb, not a photo).  A JPEG is decoded
# at a fraction of its size (draft mode), so a 48-megapixel phone photo costs a few
# MB; other formats are decoded whole (4 bytes a pixel with transparency).
MAX_PIXELS = 60_000_000
MAX_PIXELS_FULL_DECODE = 16_000_000
MAX_SIDE = 8000  # longer sides are refused by the model APIs: scaled down here
# All photos of one message, as base64: one request must stay under Anthropic's
# 32 MB (OpenAI's is larger), text and tools included.  Past it the largest photos
# are sent smaller (a JPEG of MAX_EDGE), and what still does not fit is not shown.
MESSAGE_MAX_B64 = 20_000_000
FETCH_DEADLINE_SECS = 30.0  # all photos of one message (waiting for the budget included)
BUSY = "not downloaded in time (the bot is busy with other files)"
# One decoding thread per process, apart from the default executor (which also
# resolves host names): a burst of photos waits its turn without blocking either.
_DECODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parley-images")


@runtime_checkable
class AttachmentFetcher(Protocol):
    """Optional: an Outbox that can download a user's attachment (size-capped)."""

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes: ...


def image_mime(data: bytes) -> str | None:
    """The image type of ``data`` by its signature, if it is one Parley can send."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def prepare(data: bytes) -> tuple[str, bytes] | str:
    """(mime, bytes) to send, or why the image cannot be shown."""
    mime = image_mime(data)
    if mime is None:
        return "not a JPEG, PNG, GIF or WebP image"
    try:
        with Image.open(io.BytesIO(data)) as im:  # reads the header only
            width, height = im.size
    except Exception as exc:  # Pillow raises OSError, ValueError, even SyntaxError
        log.info("image not readable: %s: %s", type(exc).__name__, exc)
        return "could not be read as an image"
    limit = MAX_PIXELS if mime == "image/jpeg" else MAX_PIXELS_FULL_DECODE
    if width * height > limit:
        return f"more than {limit // 1_000_000} million pixels"
    if mime != "image/gif" and len(data) <= SEND_MAX_BYTES and max(width, height) <= MAX_SIDE:
        return mime, data
    return _reencode(data, mime)


def _smaller(data: bytes) -> tuple[str, bytes] | str:
    """A JPEG of at most MAX_EDGE on its long side (transparency on white)."""
    try:
        with Image.open(io.BytesIO(data)) as src:
            src.draft("RGB", (MAX_EDGE, MAX_EDGE))
            im: Image.Image = ImageOps.exif_transpose(src)
            im.thumbnail((MAX_EDGE, MAX_EDGE))
            rgba = im.convert("RGBA")
            flat = Image.new("RGB", rgba.size, "white")
            flat.paste(rgba, mask=rgba.getchannel("A"))
            out = io.BytesIO()
            flat.save(out, "JPEG", quality=80)
    except Exception as exc:  # Pillow raises OSError, ValueError, even SyntaxError
        log.info("image not readable: %s: %s", type(exc).__name__, exc)
        return "could not be read as an image"
    return "image/jpeg", out.getvalue()


async def _fit(named: list[tuple[str, ImagePart]]) -> tuple[list[ImagePart], list[str]]:
    """The photos of one message within MESSAGE_MAX_B64 together: the largest made
    smaller first; what still does not fit is named as not shown."""
    total = sum(len(p.data_b64) for _, p in named)
    parts = [p for _, p in named]
    for i in sorted(range(len(named)), key=lambda k: -len(parts[k].data_b64)):
        if total <= MESSAGE_MAX_B64:
            break
        raw = base64.b64decode(parts[i].data_b64)
        ready = await asyncio.wrap_future(_DECODER.submit(_smaller, raw))
        if isinstance(ready, tuple):
            small = ImagePart(ready[0], base64.b64encode(ready[1]).decode())
            if len(small.data_b64) < len(parts[i].data_b64):
                total += len(small.data_b64) - len(parts[i].data_b64)
                parts[i] = small
    kept: list[ImagePart] = []
    missing: list[str] = []
    used = 0
    for (name, _), p in zip(named, parts, strict=True):
        if used + len(p.data_b64) > MESSAGE_MAX_B64:
            missing.append(f"{name}: not shown (the photos of one message are too large together)")
            continue
        used += len(p.data_b64)
        kept.append(p)
    return kept, missing


def _reencode(data: bytes, mime: str) -> tuple[str, bytes] | str:
    try:
        with Image.open(io.BytesIO(data)) as src:
            src.draft("RGB", (MAX_EDGE, MAX_EDGE))  # JPEG: decode at a smaller scale
            im: Image.Image = src
            if im.mode.startswith("I;16") or im.mode in ("I", "F"):
                # 16/32-bit grey, which cannot be resized: scaled to 8 bits first
                # (a plain conversion clips at 255, and the picture comes out white)
                im = im.convert("I").point(lambda v: v / 256).convert("L")
            im.thumbnail((MAX_EDGE, MAX_EDGE))  # before turning: turn the small copy
            frame = ImageOps.exif_transpose(im)
            clear = frame.mode in ("RGBA", "LA", "PA") or "transparency" in frame.info
            out = io.BytesIO()
            if clear or mime == "image/gif":
                frame.save(out, "PNG")
                mime = "image/png"
            if out.tell() == 0 or out.tell() > SEND_MAX_BYTES:  # a PNG too big: on white
                flat = Image.new("RGB", frame.size, "white")
                rgba = frame.convert("RGBA")
                flat.paste(rgba, mask=rgba.getchannel("A"))
                out = io.BytesIO()
                flat.save(out, "JPEG", quality=85)
                mime = "image/jpeg"
    except Exception as exc:  # Pillow raises OSError, ValueError, even SyntaxError
        log.info("image not readable: %s: %s", type(exc).__name__, exc)
        return "could not be read as an image"
    if out.tell() > SEND_MAX_BYTES:
        return "too large even scaled down"
    return mime, out.getvalue()


async def _one(
    fetcher: AttachmentFetcher, a: Attachment, limit: int, where: object, hold: Hold
) -> ImagePart | str:
    name = a.name or "(unnamed)"
    if a.size and a.size > limit:
        return f"{name}: larger than {limit} bytes"
    async with hold:
        try:
            data = await fetcher.fetch_attachment(a, limit)
        except Exception as exc:
            log.info("[%s] attachment %s not fetched: %s", where, name, exc)
            if str(exc).startswith("file is larger than"):
                return f"{name}: larger than {limit} bytes"
            return f"{name}: could not be downloaded"
        if len(data) > limit:
            return f"{name}: larger than {limit} bytes"
        job = _DECODER.submit(prepare, data)
        hold.release_after(job)  # the decoder has the bytes until it is done, cancelled or not
        del data
        ready = await asyncio.wrap_future(job)
    if isinstance(ready, str):
        return f"{name}: {ready}"
    return ImagePart(ready[0], base64.b64encode(ready[1]).decode())


async def fetch_images(
    fetcher: AttachmentFetcher,
    pics: list[Attachment],
    limit: int,
    where: object,
    budget: DownloadBudget,
) -> tuple[tuple[ImagePart, ...], list[str]]:
    """(the images to show, a line per photo that could not be shown), in order.

    Each photo holds its size (``limit`` when the platform gave none) of ``budget``
    from before its download until it is prepared."""
    holds = [budget.hold(a.size or limit) for a in pics]
    tasks = [
        asyncio.ensure_future(_one(fetcher, a, limit, where, h))
        for a, h in zip(pics, holds, strict=True)
    ]
    await asyncio.wait(tasks, timeout=FETCH_DEADLINE_SECS)
    shown: list[tuple[str, ImagePart]] = []
    missing: list[str] = []
    for a, h, t in zip(pics, holds, tasks, strict=True):
        if not t.done():
            busy = h.waiting  # asked first: cancelling the task ends the wait
            t.cancel()
            if busy:
                log.info("[%s] photo %s: still waiting for %s", where, a.name, budget)
            missing.append(f"{a.name or '(unnamed)'}: {BUSY if busy else 'not downloaded in time'}")
        elif t.exception() is not None:
            log.warning("[%s] photo %s not prepared", where, a.name, exc_info=t.exception())
            missing.append(f"{a.name or '(unnamed)'}: could not be read as an image")
        elif isinstance(result := t.result(), ImagePart):
            shown.append((a.name or "(unnamed)", result))
        else:
            missing.append(result)
    out, too_much = await _fit(shown)
    return tuple(out), missing + too_much
