"""People's display names from ``users.info`` (scope ``users:read``), cached.

Slack's ``app_mention`` events, and some ``message`` events, carry only the
user id.  In a channel the model reads each message as ``<name>: <text>``, so a
worker asks Slack once per person and keeps the answer for an hour (a failed
lookup for five minutes): a busy channel costs one call per person per hour per
worker, far under ``users.info``'s rate tier.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

KEEP_SECS = 3600.0
KEEP_FAILED_SECS = 300.0
LOOKUP_SECS = 1.5
MAX_KEPT = 10_000


def display_name(user: dict[str, Any]) -> str:
    """What Slack shows: the display name, else the full name, else the handle."""
    profile = user.get("profile") or {}
    for value in (
        profile.get("display_name"),
        profile.get("real_name"),
        user.get("real_name"),
        user.get("name"),
    ):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


class SlackNames:
    def __init__(self, web: AsyncWebClient) -> None:
        self.web = web
        self._kept: dict[str, tuple[str, float]] = {}

    async def name(self, user_id: str) -> str:
        now = time.monotonic()
        hit = self._kept.get(user_id)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            # under the core's 2 s, so that a slow answer is remembered as a miss too
            resp = await asyncio.wait_for(self.web.users_info(user=user_id), LOOKUP_SECS)
            user = resp.get("user")
            name, keep = display_name(user if isinstance(user, dict) else {}), KEEP_SECS
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            error = exc.response.get("error", "") if isinstance(exc, SlackApiError) else ""
            log.info("users.info for %s failed: %s", user_id, error or type(exc).__name__)
            name, keep = "", KEEP_FAILED_SECS
        if len(self._kept) >= MAX_KEPT:
            self._kept.clear()
        self._kept[user_id] = (name, now + keep)
        return name
