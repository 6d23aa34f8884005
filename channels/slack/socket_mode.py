"""Socket Mode: Slack events over a websocket held by the gateway process.

One small loop, on aiohttp (the same session as the Web API client):

1. ``apps.connections.open`` (slack_sdk AsyncWebClient, app-level token) gives a
   ``wss://`` URL;
2. the websocket is opened with a heartbeat: a ping every
   ``SLACK_SOCKET_PING_INTERVAL`` seconds, and a socket whose pong does not come
   back in time is closed and replaced (never left silently half-open);
3. each envelope is handed to :class:`SlackInbound`; its ``envelope_id`` is
   acknowledged only after ``Ingest.submit`` returned (not at all when Redis is
   unreachable: Slack redelivers); an envelope that arrives once this process is
   no longer surely the gateway lease's holder (it resumed from a pause longer
   than the lease) is neither handled nor acknowledged: Slack redelivers it, to
   the new holder's socket;
4. on ``disconnect`` (Slack refreshes sockets every few hours, and keeps the old
   one usable for a few seconds after saying so) and on stop (a deploy, the lease
   lost), the loop stops reading, lets the envelopes in flight be submitted and
   acknowledged on that socket (at most ``drain_secs``; a quarter of the lease's
   margin when the lease is lost), and only then closes it: a slash command or a
   button press whose ack is lost is never sent again (the person sees
   ``operation_timeout`` though Parley took it).  After a ``disconnect`` it
   reconnects at once; on errors with exponential backoff and jitter.

A rejected app token is one error line, then the loop waits for shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core.errors import StoreUnavailable
from agent_core.store.lease import holds, stop_grace

from .inbound import SlackInbound

log = logging.getLogger(__name__)

_GRACEFUL, _HEALTHY, _FAILED = "graceful", "healthy", "failed"
_STABLE_SECS = 30.0  # a socket that lived this long resets the backoff
# How long a socket being given up (Slack's ``disconnect``, a stop) is kept open for
# the acks of the envelopes in flight: Slack closes a socket about 10 s after its
# ``disconnect`` warning, and a submit takes a Redis round trip or two.
_DRAIN_SECS = 5.0

_AUTH_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "account_inactive",
        "not_allowed_token_type",
        "missing_scope",
    }
)


class SocketModeGateway:
    def __init__(
        self,
        inbound: SlackInbound,
        web: AsyncWebClient,
        session: aiohttp.ClientSession,
        app_token: str,
        *,
        ping_interval: float = 10.0,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        drain_secs: float = _DRAIN_SECS,
    ) -> None:
        self.inbound = inbound
        self.web = web
        self.session = session
        self._app_token = app_token
        self.ping_interval = ping_interval
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.drain_secs = drain_secs
        self.connects = 0  # sockets opened so far (tests, metrics)
        self.connected = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._valid: Callable[[], bool] = lambda: True  # the lease's, from run()'s stop

    def _backoff(self, attempt: int) -> float:
        """1st retry ~backoff_base, then doubling up to backoff_max, with jitter."""
        delay = min(self.backoff_max, self.backoff_base * 2.0 ** min(attempt - 1, 16))
        return delay * (0.5 + random.random() / 2)

    async def run(self, stop: asyncio.Event) -> None:
        self._valid = holds(stop)
        attempt = 0
        while not stop.is_set():
            try:
                url = str((await self.web.apps_connections_open(app_token=self._app_token))["url"])
            except SlackApiError as exc:
                error = str(exc.response.get("error", "")) if exc.response is not None else ""
                if error in _AUTH_ERRORS:
                    log.error(
                        "SLACK_APP_TOKEN rejected by Slack (%s): Socket Mode is off until restart",
                        error,
                    )
                    await stop.wait()
                    return
                log.warning("Slack apps.connections.open failed (%s); retrying", error or exc)
                attempt += 1
                await self._sleep(stop, self._backoff(attempt))
                continue
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                log.warning("cannot reach Slack for Socket Mode (%s); retrying", type(exc).__name__)
                attempt += 1
                await self._sleep(stop, self._backoff(attempt))
                continue
            started = time.monotonic()
            outcome = _FAILED
            try:
                outcome = await self._hold(url, stop)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                log.warning("Slack socket failed (%s); reconnecting", type(exc).__name__)
            finally:
                self.connected.clear()
            if outcome == _GRACEFUL:
                continue  # Slack's periodic refresh (or shutdown): reconnect at once
            if outcome == _HEALTHY and time.monotonic() - started >= _STABLE_SECS:
                attempt = 0
            attempt += 1
            await self._sleep(stop, self._backoff(attempt))
        if self._tasks:  # outlived the drain: their acks are lost, let the submits end
            await asyncio.wait(self._tasks, timeout=stop_grace(stop, self.drain_secs))

    @staticmethod
    async def _sleep(stop: asyncio.Event, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)

    async def _hold(self, url: str, stop: asyncio.Event) -> str:
        """Hold one socket until it ends: graceful, healthy (said hello, then died) or failed."""
        async with self.session.ws_connect(
            url, heartbeat=self.ping_interval, autoping=True, max_msg_size=0
        ) as ws:
            self.connects += 1
            log.info("Slack Socket Mode connected")
            stopper = asyncio.create_task(stop.wait())
            outcome = _FAILED
            try:
                while True:
                    receiver = asyncio.create_task(ws.receive())
                    done, _ = await asyncio.wait(
                        {receiver, stopper}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if stopper in done:
                        if receiver in done:
                            # read in the same loop turn as the stop: handled as any
                            # other (a command or a press is never sent again)
                            self._take_last(ws, receiver)
                        else:
                            receiver.cancel()
                        await self._drain(stop)
                        return _GRACEFUL
                    msg = receiver.result()
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        # CLOSE / CLOSED / ERROR (a missed pong closes the socket too)
                        log.info("Slack socket closed (%s); reconnecting", msg.type.name)
                        return outcome
                    data = orjson.loads(msg.data)
                    kind = data.get("type")
                    if kind == "hello":
                        outcome = _HEALTHY
                        self.connected.set()
                    elif kind == "disconnect":
                        reason = data.get("reason", "")
                        if reason == "link_disabled":
                            log.error("Slack disabled Socket Mode for this app; stopping it")
                            await stop.wait()
                        log.info("Slack asked to reconnect (%s)", reason)
                        await self._drain(stop)
                        return _GRACEFUL
                    elif data.get("envelope_id"):
                        self._start_envelope(ws, data)
            finally:
                stopper.cancel()

    def _start_envelope(self, ws: aiohttp.ClientWebSocketResponse, data: dict[str, Any]) -> None:
        task = asyncio.create_task(self._envelope(ws, data))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _take_last(
        self, ws: aiohttp.ClientWebSocketResponse, receiver: asyncio.Task[aiohttp.WSMessage]
    ) -> None:
        """The frame read as the stop came: an envelope in it is handled (the lease is
        checked by :meth:`_envelope`) and drained like the ones before it."""
        if receiver.cancelled() or receiver.exception() is not None:
            return
        msg = receiver.result()
        if msg.type != aiohttp.WSMsgType.TEXT:
            return
        try:
            data = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            return
        if isinstance(data, dict) and data.get("envelope_id"):
            self._start_envelope(ws, data)

    async def _drain(self, stop: asyncio.Event) -> None:
        """Before the socket closes: wait for the envelopes in flight, so that their
        acks go out on it.  Nothing more is read.  At most ``drain_secs``, cut to
        :func:`stop_grace` once ``stop`` is set (the lease lost: a fraction of its
        margin)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while self._tasks:
            stopping = stop.is_set()
            left = started + (stop_grace(stop, self.drain_secs) if stopping else self.drain_secs)
            left -= loop.time()
            if left <= 0:
                log.warning(
                    "Slack socket closed with %d envelope(s) still being handled: their "
                    "acks are lost (Slack delivers an event again, a command or a press not)",
                    len(self._tasks),
                )
                return
            waiters: set[asyncio.Future[Any]] = set(self._tasks)
            stopper = None if stopping else asyncio.ensure_future(stop.wait())
            if stopper is not None:
                waiters.add(stopper)
            try:
                await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if stopper is not None:
                    stopper.cancel()

    async def _envelope(self, ws: aiohttp.ClientWebSocketResponse, data: dict[str, Any]) -> None:
        envelope_id = str(data["envelope_id"])
        if not self._valid():  # the lease is another's now: no submit, no ack
            log.info("Slack envelope left unacknowledged: the gateway lease is no longer ours")
            return
        kind = data.get("type")
        payload = data.get("payload") or {}
        ack: dict[str, Any] = {"envelope_id": envelope_id}
        try:
            if kind == "events_api":
                await self.inbound.on_event(payload)
            elif kind == "interactive":
                if payload.get("type") == "block_actions":
                    await self.inbound.on_action(payload)
            elif kind == "slash_commands":
                ack["payload"] = await self.inbound.on_command(payload)
        except StoreUnavailable as exc:
            log.error("Slack envelope not acknowledged, Slack will redeliver: %s", exc)
            return
        except Exception:
            log.exception("could not handle a Slack %s envelope; acknowledging it", kind)
        try:
            await ws.send_str(orjson.dumps(ack).decode())
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            log.info("Slack ack lost with its socket (%s); Slack will redeliver", exc)
