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
    """EVALSHA every call in one pipeline; results in order.

    Scripts the server did not know (NOSCRIPT: they did not run) are loaded and
    only those calls are sent again, so a script that did run never runs twice.
    Any other error is raised.
    """
    async with redis.pipeline(transaction=False) as pipe:
        for script, keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        results = list(await pipe.execute(raise_on_error=False))
    missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if missing:
        for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
            await redis.script_load(script.script)
        async with redis.pipeline(transaction=False) as pipe:
            for i in missing:
                script, keys, args = calls[i]
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            again = list(await pipe.execute(raise_on_error=False))
        for i, r in zip(missing, again, strict=True):
            results[i] = r
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results
