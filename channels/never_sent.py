"""Which transport failures prove a request never left this machine.

Every channel has to tell two failures apart: a request that never reached the
platform (no connection could be made: safe to repeat) and one whose answer was
lost (it may have been carried out: never repeated blindly, see
``agent_core.errors.SendUnconfirmed``).  aiohttp (Slack, Discord, Telegram via
``channels.telegram.aiohttp_request``) and httpx (PTB's default request class)
name the first kind here.
"""

from __future__ import annotations

import aiohttp
import httpx

NEVER_SENT: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectorError,  # includes connection refused and DNS failures
    aiohttp.ConnectionTimeoutError,  # no connection (or pool slot) within the timeout
    ConnectionRefusedError,
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)


def never_sent(exc: BaseException | None) -> bool:
    """True when ``exc`` (or the exception it was raised from) proves nothing left."""
    while exc is not None:
        if isinstance(exc, NEVER_SENT):
            return True
        exc = exc.__cause__
    return False
