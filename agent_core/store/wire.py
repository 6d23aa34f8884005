"""One round trip of a few commands, without redis-py's Pipeline.

The hot path of a turn (hand-off, pacing, part claims, completion, ingest) is a
handful of round trips, each a few commands.  redis-py's asyncio ``Pipeline``
costs ~240 µs of CPU per round trip on the benchmark box (retry wrapper, a
shielded release task, per-command response callbacks, observability hooks)
against ~60 µs for the same bytes on a held connection and ~140 µs with the
pool's checkout included (bench/README.md, hot spot 12).  This module keeps
redis-py's connection, pool, command packing and hiredis reply parser, and
drops only the Pipeline object around them.  A client registered with
``share_connection`` (the general client ``make_clients`` builds) goes further:
every round trip of the process shares one pipelined connection
(``multiplex.py``), which drops the pool's checkout as well.

Differences a caller must know:

* Replies are raw RESP values: no response callbacks (``SET`` is ``b"OK"``
  or None; maps such as ``HGETALL`` or ``XREADGROUP`` are dicts under RESP3,
  redis-py 8's default, flat lists under RESP2: ``pairs`` takes both).
* A command the server refused comes back *in its place* as the
  ``ResponseError`` (``NoScriptError`` included), like
  ``pipeline.execute(raise_on_error=False)``.
* Nothing is retried once the request was written: a connection lost
  mid-reply raises ``ConnectionError`` and the caller decides (a script that
  may have run is never sent twice behind its back).  Stale pooled connections
  are still replaced before use (the pool's connect-time check), and the
  connect itself keeps the client's retry policy.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from agent_core.store.multiplex import Multiplexer

Command = Sequence[Any]

_shared: weakref.WeakKeyDictionary[Redis, Multiplexer] = weakref.WeakKeyDictionary()


def share_connection(redis: Redis) -> Multiplexer:
    """Send ``redis``'s round trips over one shared connection from now on.

    Only for a client that never carries a blocking command (``XREADGROUP
    BLOCK``): one would hold up every round trip queued behind it."""
    mux = _shared.get(redis)
    if mux is None:
        mux = _shared[redis] = Multiplexer(redis)
    return mux


async def close_shared(redis: Redis) -> None:
    """Close ``redis``'s shared connection, if it has one."""
    mux = _shared.pop(redis, None)
    if mux is not None:
        await mux.aclose()


async def roundtrip(redis: Redis, commands: Sequence[Command]) -> list[Any]:
    """Send ``commands`` in one write, read one reply each; results in order."""
    if not commands:  # nothing to send, no reply to wait for (a shared link would wait)
        return []
    mux = _shared.get(redis)
    if mux is not None:
        return await mux.roundtrip(commands)
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await conn.send_packed_command(conn.pack_commands(commands), check_health=False)
        out: list[Any] = []
        for _ in commands:
            try:
                out.append(await conn.read_response())
            except ResponseError as exc:
                out.append(exc)
    except BaseException:
        # Part of the reply may still be in flight: never reuse this connection.
        with contextlib.suppress(Exception):
            await conn.disconnect(nowait=True)
        raise
    finally:
        await pool.release(conn)
    return out


def raise_first(replies: Sequence[Any]) -> None:
    """Raise the first refusal among ``roundtrip`` replies, if any."""
    for r in replies:
        if isinstance(r, Exception):
            raise r


async def call(redis: Redis, *command: Any) -> Any:
    """One command, one round trip; a refusal is raised."""
    replies = await roundtrip(redis, [command])
    raise_first(replies)
    return replies[0]


def pairs(reply: Sequence[Any] | dict[Any, Any] | None) -> dict[Any, Any]:
    """A field/value reply (HGETALL, stream entry fields) as a dict: RESP3 maps
    arrive as dicts, RESP2 (and stream fields in both) as flat lists."""
    if isinstance(reply, dict):
        return reply
    if not reply:
        return {}
    return dict(zip(reply[::2], reply[1::2], strict=True))
