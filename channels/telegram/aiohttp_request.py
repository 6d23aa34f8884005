"""python-telegram-bot's networking over aiohttp instead of httpx.

Why by hand: PTB ships only ``HTTPXRequest``, and measured on this project's
benchmark box one Bot API call through httpx (httpcore + anyio + h11) costs
1.8-3 ms of CPU, through aiohttp 0.35 ms (``bench/README.md``, hot spot 7).
PTB's documented extension point for this is :class:`telegram.request.BaseRequest`:
one method, ``do_request``, returning ``(status, body)``; PTB keeps its own status
handling and JSON parsing.  aiohttp is already a dependency (Slack, Discord).

Errors keep PTB's types (``TimedOut``, ``NetworkError``) and chain the aiohttp
exception as ``__cause__``, so the sender can tell a request that never left
(``ClientConnectorError``, ``ConnectionTimeoutError``: safe to repeat) from one
whose answer was lost (may have been delivered: never repeated blindly).

Limits: HTTP/1.1 only; aiohttp has no write timeout (the read timeout covers a
stalled upload); no proxy setting (Parley has none for Telegram either).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import aiohttp
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData


class AiohttpRequest(BaseRequest):
    """A :class:`~telegram.request.BaseRequest` on one pooled ``aiohttp.ClientSession``."""

    __slots__ = ("_connect", "_pool", "_read", "_session", "_size")

    def __init__(
        self,
        connection_pool_size: int = 64,
        read_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 5.0,
    ) -> None:
        self._size = connection_pool_size
        self._read = read_timeout
        self._connect = connect_timeout
        self._pool = pool_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._read

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._size, keepalive_timeout=60.0)
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": self.USER_AGENT}
            )

    async def shutdown(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        if self._session is None or self._session.closed:
            await self.initialize()
        assert self._session is not None
        read = self._read if isinstance(read_timeout, DefaultValue) else read_timeout
        conn = self._connect if isinstance(connect_timeout, DefaultValue) else connect_timeout
        pool = self._pool if isinstance(pool_timeout, DefaultValue) else pool_timeout
        # ``connect`` covers waiting for a pooled connection plus connecting.
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=None if pool is None or conn is None else pool + conn,
            sock_connect=conn,
            sock_read=read,
        )
        try:
            data, headers = _body(request_data)
            async with self._session.request(
                method, url, data=data, headers=headers, timeout=timeout
            ) as response:
                return response.status, await response.read()
        except TimeoutError as err:  # ServerTimeoutError included
            raise TimedOut from err
        except aiohttp.ClientError as err:
            # Some aiohttp errors carry the request URL, and the bot token is in its
            # path: the message goes on into errors a chat can be shown.
            text = _BOT_PATH.sub("/bot<token>", str(err))
            raise NetworkError(f"aiohttp.{type(err).__name__}: {text}") from err


_FORM = {"Content-Type": "application/x-www-form-urlencoded"}
_BOT_PATH = re.compile(r"/bot[^/\s'\"]+")


def _body(request_data: RequestData | None) -> tuple[Any, dict[str, str] | None]:
    """Form fields as PTB encodes them; multipart when there are files.

    Plain calls are url-encoded here rather than by handing aiohttp a dict: its
    ``FormData`` took ~14 % of the worker's CPU with thousands of turns in flight
    (one chat action per turn every few seconds); the bytes are the same."""
    if request_data is None:
        return None, None
    fields = request_data.json_parameters
    files = request_data.multipart_data
    if not files:
        return (urlencode(fields).encode(), _FORM) if fields else (None, None)
    form = aiohttp.FormData()
    for name, value in fields.items():
        form.add_field(name, value)
    for name, item in files.items():
        filename, content, *rest = item
        form.add_field(name, content, filename=filename, content_type=rest[0] if rest else None)
    return form, None
