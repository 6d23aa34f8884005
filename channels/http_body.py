"""Reading a webhook's body with a size cap (Telegram and Slack endpoints).

A body declared larger than the cap is refused before a byte is read; one
that lies about its length (or is chunked) is refused as soon as it grows past
the cap, so memory stays bounded whatever the sender does.  Callers answer 413.
"""

from __future__ import annotations

from starlette.requests import Request


class BodyTooLarge(Exception):
    pass


async def read_capped_body(request: Request, limit: int) -> bytes:
    """The request body; raises :class:`BodyTooLarge` past ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge
    return bytes(body)
