"""Downloading a file a user posted, for the agent (Discord and Slack outboxes).

Three rules, whatever the platform:

* Only from the platform's own file hosts (``origins``: ``scheme://host[:port]``).
  The address comes from the platform's event, but it is kept in Redis and Slack's
  needs the bot token, which must never go anywhere else.
* No redirect is followed here: a file host that redirects is reported
  (:class:`Redirected`) and the caller decides (Slack sends a bot without
  ``files:read`` to its login page that way; its Enterprise Grid hands over to its
  other file host, which channels/slack/files.py follows after checking it).
* At most ``max_bytes``: a declared length over it is refused before the body is
  read, and a body that grows past it is dropped as soon as it does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import aiohttp
import yarl

from agent_core.errors import SendFailed


class Redirected(SendFailed):
    """The file host answered with a redirect instead of the file (to ``location``)."""

    def __init__(self, message: str, location: str = "") -> None:
        super().__init__(message)
        self.location = location


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` ("" if it has no host)."""
    try:
        u = yarl.URL(url)
        return str(u.origin()) if u.host else ""
    except (TypeError, ValueError):
        return ""


async def fetch_capped(
    session: aiohttp.ClientSession,
    url: str,
    *,
    origins: Collection[str],
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30,
) -> tuple[bytes, str]:
    """The file's bytes and the content type the host declared (lower case)."""
    if not url or origin(url) not in origins:
        raise SendFailed("not an address of the platform's file host")
    try:
        async with session.get(
            url,
            headers=dict(headers or {}),
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            if 300 <= resp.status < 400:
                raise Redirected(
                    f"the file host redirected (HTTP {resp.status})",
                    resp.headers.get("Location", ""),
                )
            if resp.status != 200:
                raise SendFailed(f"the file host answered HTTP {resp.status}")
            if resp.content_length is not None and resp.content_length > max_bytes:
                raise SendFailed(f"file is larger than {max_bytes} bytes")
            body = bytearray()
            async for chunk in resp.content.iter_chunked(1 << 16):
                body += chunk
                if len(body) > max_bytes:
                    raise SendFailed(f"file is larger than {max_bytes} bytes")
            return bytes(body), resp.content_type.lower()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SendFailed(f"could not download the file: {type(exc).__name__}") from exc
