"""Finding a reply part on Slack after the worker sending it died.

Every message Parley posts for a reply part carries Slack *message metadata*
(``event_type`` ``parley_part``, payload: the part's name and the message's place
in it).  A rerun that finds a part claimed but never recorded (its sender died
around the ``chat.postMessage``) asks Slack for the conversation's messages since
the claim (``conversations.history`` / ``conversations.replies`` with
``include_all_metadata``): if the part is there the rerun edits it, and if it is
not the rerun posts it.  Telegram cannot do this (a bot cannot read a chat's
history), so there the part is taken for maybe sent.

What this cannot cover: a worker that froze for longer than the thread lock's TTL
exactly between its claim and its request (the rerun looks, finds nothing, posts;
the frozen worker then wakes and posts too).  A worker that was killed never
wakes; one that stalled elsewhere lost its claim's fence before it could claim.

Reading needs the history scopes Parley asks for anyway (``channels:history``,
``groups:history``, ``im:history``).  Any failure (a missing scope, a rate limit:
apps outside the Slack Marketplace get one history call a minute) is reported,
and the agent falls back to waiting for the part and taking it for maybe sent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from agent_core.errors import SendFailed
from agent_core.events import MessageRef, ThreadKey

from .parse import CHANNEL

PART_EVENT = "parley_part"
SKEW_SECS = 120.0  # look this far before the claim (the claiming worker's clock may differ)
MAX_PAGES = 5  # of 200 messages; a part not found within them counts as unsure


def part_metadata(part: str, k: int) -> dict[str, Any]:
    """The metadata of the ``k``-th Slack message of reply part ``part``."""
    return {"event_type": PART_EVENT, "event_payload": {"part": part, "k": k}}


def reader(web: AsyncWebClient) -> AsyncWebClient:
    """A client for the look-up: the same token and connection pool, but no paced
    rate-limit retry (a history call's 429 must not pause the channel's posting)."""
    return AsyncWebClient(
        token=web.token,
        base_url=web.base_url,
        session=web.session,
        timeout=web.timeout,
        retry_handlers=[AsyncConnectionErrorRetryHandler()],
    )


async def find_part(
    web: AsyncWebClient,
    thread: ThreadKey,
    part: str,
    claimed_ms: int,
    *,
    bot_user_id: str,
    settle_secs: float,
) -> MessageRef | None:
    """The messages of ``part`` in ``thread`` posted by this bot (None: Slack has
    none of them).

    ``settle_secs``: how long after the claim the dead sender's request may still
    have been under way (the Web API timeout); the look-up waits until then, so a
    post still arriving cannot be missed.  (The claim's time is when the send
    began, before any pacing wait; a rerun comes after the thread lock's TTL
    anyway, 30 s by default, by which time a dead worker's request is over.)
    Raises SendFailed if Slack cannot say.  Only this bot's messages count:
    another app's metadata (another Parley following the same thread, say) may
    name the same part.
    """
    if claimed_ms <= 0:
        raise SendFailed("the claim's time is unknown")
    if not bot_user_id:
        raise SendFailed("the bot's user id is unknown (auth.test did not answer)")
    age = time.time() - claimed_ms / 1000  # two workers' clocks: at most settle_secs
    if age < settle_secs:
        await asyncio.sleep(min(settle_secs - age, settle_secs))
    args: dict[str, Any] = {
        "channel": thread.conversation,
        "oldest": f"{max(claimed_ms / 1000 - SKEW_SECS, 0):.6f}",
        "include_all_metadata": True,
        "limit": 200,
    }
    if thread.thread:
        args["ts"] = thread.thread
    method = "conversations.replies" if thread.thread else "conversations.history"
    found: dict[int, str] = {}
    for _ in range(MAX_PAGES):
        try:
            resp = await web.api_call(method, http_verb="GET", params=args)
        except SlackApiError as exc:
            error = exc.response.get("error", "") if exc.response is not None else ""
            raise SendFailed(f"Slack {method}: {error or 'failed'}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SendFailed(f"Slack {method}: {type(exc).__name__}") from exc
        for m in resp.get("messages") or []:
            k, ts = _place(m, part, bot_user_id)
            if ts:
                found[k] = ts
        cursor = (resp.get("response_metadata") or {}).get("next_cursor")
        if not resp.get("has_more") or not cursor:
            break
        args["cursor"] = cursor
    else:
        raise SendFailed(f"Slack {method}: part not found within {MAX_PAGES} pages")
    if not found:
        return None
    ts = [found[k] for k in sorted(found)]
    return MessageRef(
        CHANNEL, thread.conversation, ts[0], thread=thread.thread, extra=",".join(ts[1:])
    )


def _place(message: Any, part: str, bot_user_id: str) -> tuple[int, str]:
    """(k, ts) if ``message`` is this bot's k-th message of ``part``, else (0, '')."""
    if not isinstance(message, dict) or message.get("user") != bot_user_id:
        return 0, ""
    meta = message.get("metadata")
    payload = meta.get("event_payload") if isinstance(meta, dict) else None
    if not isinstance(payload, dict) or meta.get("event_type") != PART_EVENT:
        return 0, ""
    k, ts = payload.get("k", 0), message.get("ts")
    if payload.get("part") != part or not isinstance(k, int) or not isinstance(ts, str):
        return 0, ""
    return k, ts
