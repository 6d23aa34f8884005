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
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Sequence
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError, InvalidResponse


class _Waiter:
    """One round trip's place in line: how many replies it still needs."""

    __slots__ = ("future", "left", "replies")

    def __init__(self, future: asyncio.Future[list[Any]], count: int) -> None:
        self.future = future
        self.left = count
        self.replies: list[Any] = []


class _ReplyProtocol(asyncio.Protocol):
    """Reads replies off the shared connection and hands them out in order."""

    def __init__(self, mux: Multiplexer) -> None:
        self.mux = mux
        self.reader = hiredis.Reader(
            protocolError=InvalidResponse, replyError=BaseParser.parse_error
        )
        self.waiting: collections.deque[_Waiter] = collections.deque()
        self.lost: BaseException | None = None
        self.paused: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        waiting = self.waiting
        while True:
            try:
                reply = reader.gets()
            except Exception as exc:  # a protocol error: this stream is unusable
                self.mux.drop(self, ConnectionError(f"Redis reply unreadable: {exc}"))
                return
            if reply is False:
                return
            if not waiting:  # a reply nobody asked for (RESP3 push): ignore
                continue
            head = waiting[0]
            head.replies.append(reply)
            head.left -= 1
            if head.left == 0:
                waiting.popleft()
                if not head.future.done():
                    head.future.set_result(head.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.mux.drop(self, ConnectionError(f"Connection to Redis lost: {exc or 'closed'}"))

    def fail_all(self, exc: BaseException) -> None:
        self.lost = exc
        while self.waiting:
            w = self.waiting.popleft()
            if not w.future.done():
                w.future.set_exception(exc)
        if self.paused is not None and not self.paused.done():
            self.paused.set_result(None)

    def pause_writing(self) -> None:
        if self.paused is None or self.paused.done():
            self.paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.paused is not None and not self.paused.done():
            self.paused.set_result(None)


class Multiplexer:
    """The shared connection of one Redis client (see the module docstring)."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._conn: AbstractConnection | None = None
        self._transport: asyncio.Transport | None = None
        self._proto: _ReplyProtocol | None = None
        self._stream: asyncio.StreamWriter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Lock | None = None
        self._closed = False

    async def roundtrip(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        proto = self._proto
        if proto is None or proto.lost is not None or self._loop is not asyncio.get_running_loop():
            proto = await self._connect()
        transport = self._transport
        assert transport is not None and self._conn is not None
        future: asyncio.Future[list[Any]] = self._loop.create_future()  # type: ignore[union-attr]
        # No await between the write and taking a place in line: replies come in
        # the order the requests were written.
        transport.writelines(self._conn.pack_commands(commands))
        proto.waiting.append(_Waiter(future, len(commands)))
        if proto.paused is not None and not proto.paused.done():
            await asyncio.shield(proto.paused)
        return await future

    async def _connect(self) -> _ReplyProtocol:
        loop = asyncio.get_running_loop()
        if self._closed:
            raise ConnectionError("Redis client closed")
        if self._loop is not loop:  # first use, or the client moved to another loop
            self._forget()
            self._loop = loop
            self._connecting = asyncio.Lock()
        assert self._connecting is not None
        async with self._connecting:
            proto = self._proto
            if proto is not None and proto.lost is None:
                return proto  # another caller connected while this one waited
            self._forget()
            conn = self.redis.connection_pool.make_connection()  # type: ignore[no-untyped-call]
            await conn.connect()  # TLS, AUTH, HELLO, SELECT; the client's retry policy
            writer = conn._writer
            assert writer is not None
            transport = writer.transport
            # The handshake is done and read; from here the replies are ours.
            conn._parser.on_disconnect()
            conn._reader = conn._writer = None
            proto = _ReplyProtocol(self)
            transport.set_protocol(proto)
            # Kept: a StreamWriter closes its transport when it is collected.
            self._stream = writer
            self._conn, self._transport, self._proto = conn, transport, proto
            return proto

    def drop(self, proto: _ReplyProtocol, exc: BaseException) -> None:
        """Fail what waits on ``proto`` and close its transport (once)."""
        if proto.lost is not None:
            return
        proto.fail_all(exc)
        if proto is self._proto and self._transport is not None:
            with contextlib.suppress(Exception):
                self._transport.close()

    def _forget(self) -> None:
        if self._proto is not None:
            self.drop(self._proto, ConnectionError("Redis connection replaced"))
        self._conn = self._transport = self._proto = None
        self._stream = None

    async def aclose(self) -> None:
        self._closed = True
        transport = self._transport
        self._forget()
        if transport is not None:
            await asyncio.sleep(0)  # let the transport finish closing
