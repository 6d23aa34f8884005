"""A server on 127.0.0.1 in front of the test Valkey (its unix socket), for the
Redis client tests: plain or TLS, forwarding after a delay or hanging up at once,
or hanging up instead of passing on a reply (the command ran, its answer is lost);
it counts the connections it accepted and those still open."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable

from agent_core.store.embedded import EmbeddedValkey


async def _pipe(
    r: asyncio.StreamReader, w: asyncio.StreamWriter, cut: Callable[[], bool] = lambda: False
) -> None:
    with contextlib.suppress(OSError):
        while data := await r.read(65536):
            if cut():
                break
            w.write(data)
            await w.drain()
    w.close()


@contextlib.asynccontextmanager
async def valkey_proxy(
    valkey: EmbeddedValkey,
    *,
    forward: bool = True,
    delay: float = 0.0,
    tls: ssl.SSLContext | None = None,
    cut_replies: Callable[[], bool] = lambda: False,
) -> AsyncIterator[dict[str, int]]:
    """Yields ``{"port", "accepted", "open"}``; ``forward=False`` hangs up on every
    connection at once; while ``cut_replies()`` is true, a reply from the server
    closes the connection instead of reaching the client."""
    seen = {"accepted": 0, "open": 0}
    tasks: set[asyncio.Task[None]] = set()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        seen["accepted"] += 1
        seen["open"] += 1
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            if forward:
                await asyncio.sleep(delay)
                ur, uw = await asyncio.open_unix_connection(str(valkey.socket_path))
                try:
                    await asyncio.gather(_pipe(r, uw), _pipe(ur, w, cut_replies))
                finally:
                    uw.close()
        finally:
            w.close()
            seen["open"] -= 1

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    seen["port"] = server.sockets[0].getsockname()[1]
    try:
        yield seen
    finally:
        server.close()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
