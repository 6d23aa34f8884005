"""Running Lua scripts in pipelines without redis-py's per-pipeline SCRIPT EXISTS.

redis-py checks ``SCRIPT EXISTS`` before every pipeline that holds a Script:
one extra round trip per hand-off batch, lock renewal and send-pacing
reservation.  Here pipelines send EVALSHA directly; on NOSCRIPT (a restarted or
flushed server) the scripts are loaded and the pipeline is sent again.  Only
pipelines made of idempotent scripts use this (hand-off, renew, pace).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

Call = tuple[AsyncScript, Sequence[Any], Sequence[Any]]


async def run_pipelined(redis: Redis, calls: Sequence[Call]) -> list[Any]:
    for attempt in range(2):
        async with redis.pipeline(transaction=False) as pipe:
            for script, keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            try:
                return list(await pipe.execute())
            except NoScriptError:
                if attempt:
                    raise
        for script in {id(c[0]): c[0] for c in calls}.values():
            await redis.script_load(script.script)
    raise AssertionError("unreachable")
