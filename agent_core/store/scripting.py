"""Running Lua scripts in pipelines without redis-py's per-pipeline SCRIPT EXISTS.

redis-py checks ``SCRIPT EXISTS`` before every pipeline that holds a Script:
one extra round trip per hand-off batch, lock renewal and send-pacing
reservation.  Here pipelines send EVALSHA directly; on NOSCRIPT (a restarted or
flushed server) the scripts are loaded and the pipeline is sent again.  Calls go
through ``agent_core.store.wire`` (no Pipeline object: see there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from agent_core.store.wire import Command, raise_first, roundtrip

Call = tuple[AsyncScript, Sequence[Any], Sequence[Any]]


async def run_pipelined(
    redis: Redis, calls: Sequence[Call], then: Sequence[Command] = ()
) -> list[Any]:
    """EVALSHA every call in one round trip (``wire.roundtrip``); results in order.

    ``then``: plain commands sent after the scripts in the same round trip
    (idempotent ones: they are sent again with any script that has to be);
    their replies are not returned (``run_pipelined_then`` returns them).

    Scripts the server did not know (NOSCRIPT: they did not run) are loaded and
    only those calls are sent again, so a script that did run never runs twice.
    Any other error is raised.
    """
    results, after = await run_pipelined_then(redis, calls, then)
    raise_first(after)
    return results


async def run_pipelined_then(
    redis: Redis, calls: Sequence[Call], then: Sequence[Command]
) -> tuple[list[Any], list[Any]]:
    """``run_pipelined``, also returning the replies of ``then``: those of its
    last sending, which follows every script's run (after a NOSCRIPT, the
    reloaded scripts' second sending).  A refusal among the scripts is raised;
    one among ``then`` is returned in its place, for the caller to judge."""

    def evalsha(c: Call) -> Command:
        script, keys, args = c
        return ("EVALSHA", script.sha, len(keys), *keys, *args)

    replies = await roundtrip(redis, [*map(evalsha, calls), *then])
    results, after = replies[: len(calls)], replies[len(calls) :]
    missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if missing:
        for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
            await redis.script_load(script.script)
        again = await roundtrip(redis, [*(evalsha(calls[i]) for i in missing), *then])
        for i, r in zip(missing, again[: len(missing)], strict=True):
            results[i] = r
        after = again[len(missing) :]
    raise_first(results)
    return results, after


async def run_script(
    redis: Redis, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]
) -> Any:
    """One script, one round trip (two after a server restart or flush)."""
    return (await run_pipelined(redis, [(script, keys, args)]))[0]
