"""A worker's look-out for gateway connections no process holds.

Discord (always), Telegram in polling mode and Slack Socket Mode are heard only
by a process of role ``gateway`` (or ``all``); the web and worker processes never
connect.  A formation with no gateway process (app.json starts with none) leaves
such a platform silent while every process looks healthy.  A worker checks each
needed gateway's lease key once a minute (one EXISTS each), after a grace period
after its start, and logs one warning per episode: when the lease had no holder
at two checks in a row (a gateway restarting is not one), and one line when it
is held again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.store import keys

log = logging.getLogger(__name__)

GRACE_SECS = 60.0
INTERVAL_SECS = 60.0


def missing_line(channel: str, on_heroku: bool) -> str:
    how = "heroku ps:scale gateway=1" if on_heroku else "run `parley run gateway`"
    return f"no process holds the {channel} gateway: is a gateway process running? {how}"


async def watch_gateways(
    redis: Redis,
    leases: dict[str, str],
    stop: asyncio.Event,
    *,
    on_heroku: bool,
    grace: float = GRACE_SECS,
    interval: float = INTERVAL_SECS,
) -> None:
    """Until ``stop``: ``leases`` maps a channel to its gateway lease's name."""
    misses = dict.fromkeys(leases, 0)
    warned: set[str] = set()
    wait = grace
    while leases:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
        if stop.is_set():
            return
        wait = interval
        for channel, lease in leases.items():
            try:
                held = bool(await redis.exists(keys.lease(f"gateway:{lease}")))
            except (RedisError, OSError):
                continue  # Redis trouble is reported elsewhere
            if held:
                misses[channel] = 0
                if channel in warned:
                    warned.discard(channel)
                    log.info("the %s gateway is held again", channel)
                continue
            misses[channel] += 1
            if misses[channel] >= 2 and channel not in warned:
                warned.add(channel)
                log.warning(missing_line(channel, on_heroku))
