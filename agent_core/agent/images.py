"""The photos of a user's message, for a vision model.

Fetched on demand through the channel's outbox (the optional
:class:`AttachmentFetcher`), up to ``MAX_ATTACHMENT_BYTES`` each.  The format is
read from the bytes, not taken from the platform's label: the model APIs accept
JPEG, PNG, GIF and WebP and refuse a request whose label does not match the data,
and a user's "image" can be HEIC, SVG or a mislabelled file.  A photo that cannot
be shown is named to the model with the reason, so it does not answer as if it
had seen it.
"""

from __future__ import annotations

import base64
import logging
from typing import Protocol, runtime_checkable

from agent_core.events import Attachment
from agent_core.llm.base import ImagePart

log = logging.getLogger(__name__)


@runtime_checkable
class AttachmentFetcher(Protocol):
    """Optional: an Outbox that can download a user's attachment (size-capped)."""

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes: ...


def image_mime(data: bytes) -> str | None:
    """The image type of ``data`` by its signature, if a vision model takes it."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


async def fetch_images(
    fetcher: AttachmentFetcher, pics: list[Attachment], limit: int, where: object
) -> tuple[tuple[ImagePart, ...], list[str]]:
    """(the images to show, a line per photo that could not be shown)."""
    out: list[ImagePart] = []
    missing: list[str] = []
    for a in pics:
        name = a.name or "(unnamed)"
        if a.size and a.size > limit:
            missing.append(f"{name}: larger than {limit} bytes")
            continue
        try:
            data = await fetcher.fetch_attachment(a, limit)
        except Exception as exc:
            log.info("[%s] attachment %s not fetched: %s", where, name, exc)
            missing.append(f"{name}: could not be downloaded")
            continue
        mime = image_mime(data)
        if len(data) > limit:
            missing.append(f"{name}: larger than {limit} bytes")
        elif mime is None:
            missing.append(f"{name}: not a JPEG, PNG, GIF or WebP image")
        else:
            out.append(ImagePart(mime, base64.b64encode(data).decode()))
    return tuple(out), missing
