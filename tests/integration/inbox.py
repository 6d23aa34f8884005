"""What the inbox stream has taken in, read in a way the sweeper's trim cannot change.

A running worker's sweeper deletes acknowledged entries (TRIM_ACKED), so XLEN and
XRANGE after a turn race it; the stream's ``entries-added`` counter never goes down.
"""

from __future__ import annotations

from typing import Any

from agent_core.store import keys


async def ever_published(redis: Any) -> int:
    """How many events were ever added to the inbox stream (0 when it does not exist)."""
    if not await redis.exists(keys.INBOX_STREAM):
        return 0
    return int((await redis.xinfo_stream(keys.INBOX_STREAM))["entries-added"])
