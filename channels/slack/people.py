"""People's display names from ``users.info`` (scope ``users:read``), cached.

Slack's ``app_mention`` events, and some ``message`` events, carry only the
user id.  In a channel the model reads each message as ``<name>: <text>``, so a
worker asks Slack once per person and keeps the answer for an hour (a failed
lookup for five minutes): a busy channel costs one call per person per hour per
worker, far under ``users.info``'s rate tier.

The people a message mentions arrive as ids (``<@U0123ABCD>``, which
channels/slack/parse.py turns into ``@U0123ABCD``); :meth:`SlackNames.mentions`
puts their names there, from the same cache (at most :data:`MAX_MENTIONS`
different people per message are looked up; the others stay ids).
"""

from __future__ import annotations

import asyncio
import logging
import re
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
MAX_MENTIONS = 20
# "@U0123ABCD" as parse.plain_text leaves a mention Slack sent without a label
# (user ids: U or W and upper-case letters and digits)
_MENTION = re.compile(r"(?<![\w@])@([UW][A-Z0-9]{6,14})(?!\w)")


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

    async def mentions(self, text: str) -> str:
        """``text`` with the people it mentions by id named (unknown ones stay ids)."""
        ids = list(dict.fromkeys(_MENTION.findall(text)))[:MAX_MENTIONS]
        if not ids:
            return text
        names = dict(zip(ids, await asyncio.gather(*(self.name(i) for i in ids)), strict=True))

        def named(m: re.Match[str]) -> str:
            name = names.get(m.group(1))
            return f"@{name}" if name else m.group(0)

        return _MENTION.sub(named, text)
