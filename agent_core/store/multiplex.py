"""One Redis connection shared by every round trip of a process (pipelined).

redis-py gives each concurrent caller a connection of its own from a pool:
checking one out and back in (a lock, connection-count metrics, an event
dispatch) was most of the ~140 µs of CPU a hot-path round trip cost on the
benchmark box (bench/README.md, hot spot 18).  Redis answers the commands on
one connection in the order they were written, so concurrent callers can share
a single connection instead: each writes its packed commands at once (no
await between the write and taking its place in line) and waits on a future
that the connection's reader completes when that many replies have arrived.

redis-py has no such client (aioredis 1.x had one, and was folded into redis-py
without it), so this is written by hand, small: redis-py still makes and sets
up the connection (TLS, AUTH, HELLO 3, SELECT, keepalive, connect retries) and
packs the commands; hiredis (redis-py's parser) parses the replies.  After the
handshake the transport's reading side is handed to ``_ReplyProtocol``.

Only non-blocking commands belong here: one ``XREADGROUP BLOCK`` would hold up
every caller behind it (those go through the ``blocking`` client's pool).

Failure semantics are the ones ``wire.roundtrip`` documents: a command the
server refused comes back in its place; nothing is re-sent once written; a
connection lost with replies outstanding fails each waiting round trip with
``ConnectionError`` and the next round trip connects again.  A caller cancelled
while waiting does not spoil the connection: its replies are read and dropped.
Callers that arrive while the connection is being made wait for that one
attempt and share its outcome.  Server pushes (RESP3 ``>``: client tracking,
maintenance notices) are nobody's reply and are skipped.

One client, one event loop: a client used again from a second loop connects
again there; the first loop's socket, if that loop is closed already, is shut
down and left to the garbage collector.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
from collections.abc import Sequence
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError, InvalidResponse

_PUSH: Any = hiredis.PushNotification  # hiredis >= 3.2 (a dependency floor)
_CLOSE_WAIT = 2.0  # seconds aclose waits for the transport to finish closing


def _reader(parser: Any) -> hiredis.Reader:
    """redis-py's own hiredis reader for this connection: it holds whatever was read
    past the handshake's last reply, and decodes as the client was told to.  Its
    "no complete reply yet" is redis-py's sentinel, never False (RESP3 ``#f``)."""
    reader = getattr(parser, "_reader", None)
    if isinstance(reader, hiredis.Reader):
        return reader
    return hiredis.Reader(  # pragma: no cover - redis-py parses with hiredis when present
        protocolError=InvalidResponse,
        replyError=BaseParser.parse_error,
        notEnoughData=NOT_ENOUGH_DATA,
    )


class _Waiter:
    """One round trip's place in line: how many replies it still needs."""

    __slots__ = ("future", "left", "replies")

    def __init__(self, future: asyncio.Future[list[Any]], count: int) -> None:
        self.future = future
        self.left = count
        self.replies: list[Any] = []


class _Link(asyncio.Protocol):
    """One shared connection: its transport, and the replies it hands out in order."""

    def __init__(
        self, conn: AbstractConnection, stream: asyncio.StreamWriter, reader: hiredis.Reader
    ) -> None:
        self.conn = conn  # packs commands (its encoder)
        self.stream = stream  # kept: a StreamWriter closes its transport when collected
        self.transport: asyncio.Transport = stream.transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()
        self.reader = reader
        self.waiting: collections.deque[_Waiter] = collections.deque()
        self.lost: BaseException | None = None
        self.closed = self.loop.create_future()
        self.writable = asyncio.Event()
        self.writable.set()

    def send(self, commands: Sequence[Sequence[Any]]) -> asyncio.Future[list[Any]]:
        """Write ``commands`` and take a place in line, in one step (no await)."""
        if self.lost is not None or self.transport.is_closing():
            # lost between the connect and this caller's turn to run
            raise self.lost or ConnectionError("Connection to Redis lost: closing")
        future: asyncio.Future[list[Any]] = self.loop.create_future()
        self.transport.writelines(self.conn.pack_commands(commands))
        self.waiting.append(_Waiter(future, len(commands)))
        return future

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        waiting = self.waiting
        while True:
            try:
                reply = reader.gets()
            except Exception as exc:  # a protocol error: this stream is unusable
                self.drop(ConnectionError(f"Redis reply unreadable: {exc}"))
                return
            if reply is NOT_ENOUGH_DATA:
                return
            if isinstance(reply, _PUSH):
                continue  # a server push is nobody's reply
            if not waiting:  # a reply nobody asked for (e.g. read past the handshake)
                self.drop(ConnectionError("Redis sent a reply nobody asked for"))
                return
            head = waiting[0]
            head.replies.append(reply)
            head.left -= 1
            if head.left == 0:
                waiting.popleft()
                if not head.future.done():
                    head.future.set_result(head.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail_all(ConnectionError(f"Connection to Redis lost: {exc or 'closed'}"))
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def fail_all(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
        while self.waiting:
            w = self.waiting.popleft()
            if not w.future.done():
                w.future.set_exception(exc)
        self.writable.set()

    def drop(self, exc: BaseException) -> None:
        """Fail whatever waits here and close the transport."""
        self.fail_all(exc)
        if self.loop.is_closed():
            # Its loop is gone, so the transport cannot close itself: let the
            # server see the end; the socket is freed with the garbage.
            with contextlib.suppress(Exception):
                self.transport.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
        else:
            with contextlib.suppress(RuntimeError):
                if self.loop is asyncio.get_running_loop():
                    self.transport.close()
                    return
            self.loop.call_soon_threadsafe(self.transport.close)


async def _open(pool: Any) -> _Link:
    conn = pool.make_connection()
    await conn.connect()  # TLS, AUTH, HELLO, SELECT; the client's retry policy
    stream, incoming = conn._writer, conn._reader
    try:
        if stream is None or incoming is None:
            raise ConnectionError("Connection to Redis lost during the handshake")
        if incoming.at_eof() or incoming.exception() or stream.transport.is_closing():
            # the end arrived with the handshake's last reply: after the hand-over
            # nobody would tell the link
            raise ConnectionError("Connection to Redis closed after the handshake")
        buffered = bytes(incoming._buffer)  # read past the handshake's last reply
        link = _Link(conn, stream, _reader(conn._parser))
    except BaseException:
        conn._close()
        raise
    conn._parser.on_disconnect()
    conn._reader = conn._writer = None  # the connection object only packs from now on
    link.transport.set_protocol(link)
    link.data_received(buffered)  # and what hiredis holds already: a push is skipped
    return link


class Multiplexer:
    """The shared connection of one Redis client (see the module docstring)."""

    def __init__(self, redis: Redis) -> None:
        # the pool, not the client: the registry's value must not keep its key alive
        self.pool = redis.connection_pool
        self._link: _Link | None = None
        self._connecting: asyncio.Task[_Link] | None = None
        self._closed = False

    async def roundtrip(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        link = self._link
        if link is None or link.lost is not None or link.loop is not asyncio.get_running_loop():
            link = await self._connected()
        future = link.send(commands)
        if not link.writable.is_set():
            try:
                await link.writable.wait()  # the socket's buffer is full: let it drain
            except BaseException:
                future.cancel()  # its replies are still read, and dropped
                raise
        return await future

    async def _connected(self) -> _Link:
        if self._closed:
            raise ConnectionError("Redis client closed")
        loop = asyncio.get_running_loop()
        task = self._connecting
        if task is not None and task.get_loop() is not loop:
            task = self._connecting = None
        if task is None:
            if self._link is not None:
                self._link.drop(ConnectionError("Redis connection replaced"))
                self._link = None
            task = self._connecting = loop.create_task(self._connect())
            task.add_done_callback(self._connect_done)
        await asyncio.wait([task])  # cancelling this caller leaves the attempt running
        if task.cancelled():
            raise ConnectionError("Redis client closed")
        return task.result()

    async def _connect(self) -> _Link:
        link = await _open(self.pool)
        if self._closed:  # closed while this attempt ran
            link.drop(ConnectionError("Redis client closed"))
            raise ConnectionError("Redis client closed")
        self._link = link
        return link

    def _connect_done(self, task: asyncio.Task[_Link]) -> None:
        if self._connecting is task:
            self._connecting = None
        if not task.cancelled():
            task.exception()  # retrieved: every waiter raised it already

    async def aclose(self) -> None:
        self._closed = True
        task, self._connecting = self._connecting, None
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            await asyncio.wait([task])
        link, self._link = self._link, None
        if link is not None:
            link.drop(ConnectionError("Redis client closed"))
            if link.loop is asyncio.get_running_loop():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(link.closed), _CLOSE_WAIT)
