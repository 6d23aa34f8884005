"""Socket Mode against the fake's websocket: ack after submit, reconnects, dead sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.ingest import Ingest
from agent_core.store.lease import LeaseStop, stop_grace
from channels.slack.channel import SlackChannel
from channels.slack.inbound import SlackInbound
from channels.slack.socket_mode import SocketModeGateway
from channels.slack.state import SlackState
from tests.fakes.slack import BOT_USER, TEAM, FakeSlack

Published = Callable[[], Awaitable[list[InboundEvent]]]


@contextlib.asynccontextmanager
async def running(
    gateway_run: Callable[[asyncio.Event], Awaitable[None]],
) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    task = asyncio.create_task(gateway_run(stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_events_are_acked_after_submit(
    fake_slack: FakeSlack, slack: SlackChannel, ingest: Ingest, published: Published
) -> None:
    async with running(lambda stop: slack.run_gateway(ingest, stop)):
        await fake_slack.wait_connected()
        env = await fake_slack.push("events_api", fake_slack.message("D1", "over the socket"))
        assert await fake_slack.wait_ack(env) == {"envelope_id": env}
        [ev] = await published()
        assert ev.text == "over the socket" and ev.thread == ThreadKey("slack", TEAM, "D1", "")
        # a redelivery of the same event is acked and not published twice
        body = fake_slack.message("D1", "twice")
        for attempt in (0, 1):
            await fake_slack.wait_ack(
                await fake_slack.push("events_api", body, retry_attempt=attempt)
            )
        assert [e.text for e in await published()] == ["over the socket", "twice"]


async def test_interactive_and_slash_commands(
    fake_slack: FakeSlack, slack: SlackChannel, ingest: Ingest, published: Published
) -> None:
    from agent_core.events import Button, OutboundMessage

    thread = ThreadKey("slack", TEAM, "D3", "")
    ref = await slack.outbox().send(
        thread, OutboundMessage("ok?", buttons=(Button("Approve", "tok1"),))
    )
    async with running(lambda stop: slack.run_gateway(ingest, stop)):
        await fake_slack.wait_connected()
        env = await fake_slack.push(
            "interactive", fake_slack.press("D3", ref.message_id, "Approve")
        )
        await fake_slack.wait_ack(env)
        env = await fake_slack.push("slash_commands", fake_slack.command("D3", "hello"))
        ack = await fake_slack.wait_ack(env)
        assert ack["payload"]["response_type"] == "ephemeral"
    action, command = await published()
    assert (
        action.kind == EventKind.ACTION
        and action.action is not None
        and action.action.token == "tok1"
    )
    assert command.text == "hello" and command.is_direct


async def test_reconnects_after_the_socket_is_dropped(
    fake_slack: FakeSlack, slack: SlackChannel, ingest: Ingest, published: Published
) -> None:
    async with running(lambda stop: slack.run_gateway(ingest, stop)):
        await fake_slack.wait_connected(1)
        await fake_slack.drop_sockets()
        await fake_slack.wait_connected(2)
        env = await fake_slack.push("events_api", fake_slack.message("D1", "after the drop"))
        await fake_slack.wait_ack(env)
        # Slack's periodic refresh: reconnect at once on a disconnect message
        await fake_slack.request_disconnect()
        await fake_slack.wait_connected(3)
    assert [e.text for e in await published()] == ["after the drop"]
    assert len(fake_slack.calls_to("apps.connections.open")) == 3


async def test_half_open_socket_is_detected_and_replaced(
    fake_slack: FakeSlack, slack: SlackChannel, ingest: Ingest, published: Published
) -> None:
    async with running(lambda stop: slack.run_gateway(ingest, stop)):
        await fake_slack.wait_connected(1)
        fake_slack.freeze()  # no pongs: the socket looks up but is dead
        await asyncio.sleep(0.1)
        assert fake_slack.sockets_opened == 1
        await fake_slack.wait_connected(2, within=5)
        env = await fake_slack.push("events_api", fake_slack.message("D1", "fresh socket"))
        await fake_slack.wait_ack(env)
    assert [e.text for e in await published()] == ["fresh socket"]


async def test_no_ack_when_the_store_is_down(fake_slack: FakeSlack, slack: SlackChannel) -> None:
    broken = Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    inbound = SlackInbound(Ingest(broken), SlackState(broken, 60), bot_user_id=lambda: BOT_USER)
    gateway = SocketModeGateway(
        inbound, slack.web, slack.session, fake_slack.app_token, ping_interval=0.2
    )
    try:
        async with running(gateway.run):
            await fake_slack.wait_connected()
            env = await fake_slack.push("events_api", fake_slack.message("D1", "lost?"))
            with pytest.raises(TimeoutError):
                await fake_slack.wait_ack(env, within=0.5)
    finally:
        await broken.aclose()


async def test_an_envelope_after_the_lease_is_gone_is_not_submitted_nor_acked(
    fake_slack: FakeSlack, slack: SlackChannel, ingest: Ingest, published: Published
) -> None:
    """What the operator saw: a gateway process resuming from a pause longer than its
    lease (another process had taken the Socket Mode connection over) went on
    handling and acknowledging envelopes beside the new holder.  Once the lease is
    not surely ours an envelope is left alone: Slack redelivers an unacknowledged
    envelope, to the new holder."""
    held = [True]
    stop = LeaseStop(lambda: held[0])
    task = asyncio.create_task(slack.run_gateway(ingest, stop))
    try:
        await fake_slack.wait_connected()
        env = await fake_slack.push("events_api", fake_slack.message("D1", "held"))
        await fake_slack.wait_ack(env)
        held[0] = False  # resumed from a pause: the lease is another process's now
        env = await fake_slack.push("events_api", fake_slack.message("D1", "not ours"))
        with pytest.raises(TimeoutError):
            await fake_slack.wait_ack(env, within=0.5)
        assert [e.text for e in await published()] == ["held"]
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_bad_app_token_is_one_line_not_a_loop(
    fake_slack: FakeSlack,
    channel_factory: Callable[..., SlackChannel],
    ingest: Ingest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ch = channel_factory(slack_app_token="xapp-wrong")
    await ch.initialize()
    try:
        with caplog.at_level(logging.ERROR, logger="channels.slack"):
            async with running(lambda stop: ch.run_gateway(ingest, stop)):
                await asyncio.sleep(0.5)
    finally:
        await ch.shutdown()
    assert len(fake_slack.calls_to("apps.connections.open", ok=None)) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [
        "SLACK_APP_TOKEN rejected by Slack (invalid_auth): Socket Mode is off until restart"
    ]
    assert all("xapp-wrong" not in r.getMessage() for r in caplog.records)


class Held:
    """An ingest filter that holds every event until :attr:`gate` opens: envelopes
    in flight (being submitted) for as long as a test needs."""

    def __init__(self, ingest: Ingest) -> None:
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        ingest.add_filter(self)

    async def __call__(self, event: InboundEvent) -> None:
        self.entered.set()
        await self.gate.wait()


async def test_a_slash_command_in_flight_at_a_socket_refresh_is_still_acknowledged(
    fake_slack: FakeSlack, slack: SlackChannel, ingest: Ingest, published: Published
) -> None:
    """Slack's refresh (``disconnect``, every few hours) closed the socket at once,
    while an envelope read just before was still being submitted: its ack went to
    a closed socket.  A slash command (or a button press) is never sent again: the
    person saw operation_timeout though Parley took it, and typed it again.  The
    socket is now kept until the envelopes in flight are acknowledged on it (Slack
    keeps a socket a few seconds after its ``disconnect``), then replaced."""
    held = Held(ingest)
    async with running(lambda stop: slack.run_gateway(ingest, stop)):
        await fake_slack.wait_connected(1)
        env = await fake_slack.push("slash_commands", fake_slack.command("D3", "hello"))
        await asyncio.wait_for(held.entered.wait(), 5)
        await fake_slack.request_disconnect("warning")
        await asyncio.sleep(0.2)  # the gateway reads the disconnect meanwhile
        held.gate.set()
        ack = await fake_slack.wait_ack(env)
        assert ack["payload"]["response_type"] == "ephemeral"
        await fake_slack.wait_connected(2)  # and then reconnects
    [command] = await published()
    assert command.text == "hello"


async def test_an_envelope_in_flight_at_a_stop_is_acknowledged_before_the_socket_closes(
    fake_slack: FakeSlack, slack: SlackChannel, ingest: Ingest, published: Published
) -> None:
    """A stop (a deploy) closed the socket at once as well: the button press being
    submitted lost its ack (and its presser saw the warning icon)."""
    thread = ThreadKey("slack", TEAM, "D3", "")
    from agent_core.events import Button, OutboundMessage

    ref = await slack.outbox().send(thread, OutboundMessage("ok?", buttons=(Button("Go", "t1"),)))
    held = Held(ingest)
    stop = asyncio.Event()
    task = asyncio.create_task(slack.run_gateway(ingest, stop))
    try:
        await fake_slack.wait_connected(1)
        env = await fake_slack.push("interactive", fake_slack.press("D3", ref.message_id, "Go"))
        await asyncio.wait_for(held.entered.wait(), 5)
        stop.set()
        await asyncio.sleep(0.2)  # the gateway sees the stop meanwhile
        held.gate.set()
        await fake_slack.wait_ack(env)
    finally:
        stop.set()
        held.gate.set()
        await asyncio.wait_for(task, 5)
    assert fake_slack.sockets_opened == 1
    [press] = await published()
    assert press.kind == EventKind.ACTION


async def test_a_lost_lease_cuts_the_wait_for_envelopes_in_flight_to_its_margin(
    fake_slack: FakeSlack, slack: SlackChannel, ingest: Ingest
) -> None:
    """The wait for acks must not keep the socket past the lease's margin: another
    process may take the lease (and Slack's events) then.  Lease lost: at most a
    quarter of the margin, however long the envelope takes (the process stopping
    would wait ``drain_secs``)."""
    held = Held(ingest)
    lost = asyncio.Event()
    stop = LeaseStop(lambda: True, margin=0.4, lost=lost)
    assert stop_grace(stop, 60.0) == 60.0  # the process stopping: the full wait
    gateway = SocketModeGateway(
        slack._inbound(ingest),
        slack.web,
        slack.session,
        fake_slack.app_token,
        ping_interval=0.2,
    )
    gateway.drain_secs = 60.0
    task = asyncio.create_task(gateway.run(stop))
    try:
        await fake_slack.wait_connected(1)
        env = await fake_slack.push("events_api", fake_slack.message("D1", "slow"))
        await asyncio.wait_for(held.entered.wait(), 5)
        lost.set()
        stop.set()
        assert stop_grace(stop, 60.0) == 0.1
        await asyncio.wait_for(task, 3)  # not 60 s, nor the 5 s of the old final wait
        assert env not in fake_slack.acks
    finally:
        held.gate.set()
        stop.set()
        await asyncio.wait_for(task, 5)


class _StopWhileReadingWS:
    """A socket whose envelope frame is read in the same loop turn as the stop."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.sent: list[dict[str, Any]] = []
        self.frames: list[dict[str, Any]] = [
            {"type": "hello"},
            {"envelope_id": "E1", "type": "slash_commands", "payload": {"command": "/parley"}},
        ]

    async def receive(self) -> aiohttp.WSMessage:
        if not self.frames:
            await asyncio.Event().wait()
        frame = self.frames.pop(0)
        if frame.get("envelope_id"):
            self.stop.set()  # the deploy's SIGTERM lands while this frame is read
        return aiohttp.WSMessage(aiohttp.WSMsgType.TEXT, orjson.dumps(frame).decode(), None)

    async def send_str(self, data: str) -> None:
        self.sent.append(orjson.loads(data))

    async def __aenter__(self) -> _StopWhileReadingWS:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _OneSocketSession:
    def __init__(self, ws: _StopWhileReadingWS) -> None:
        self.ws = ws

    def ws_connect(self, url: str, **kw: Any) -> _StopWhileReadingWS:
        return self.ws


class _SocketURL:
    async def apps_connections_open(self, app_token: str) -> dict[str, str]:
        return {"url": "wss://example.invalid/socket"}


class _Commands:
    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    async def on_command(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.commands.append(payload)
        return {"text": "on it"}


async def test_an_envelope_read_as_the_stop_comes_is_submitted_and_acknowledged() -> None:
    """When the receive and the stop completed in the same loop turn, the frame read
    was thrown away with ``receiver.cancel()``: a slash command (or a press) neither
    submitted nor acknowledged, which Slack never sends again (operation_timeout)."""
    stop = asyncio.Event()
    ws = _StopWhileReadingWS(stop)
    inbound = _Commands()
    gateway = SocketModeGateway(
        inbound,  # type: ignore[arg-type]
        _SocketURL(),  # type: ignore[arg-type]
        _OneSocketSession(ws),  # type: ignore[arg-type]
        "xapp-1",
        drain_secs=1.0,
    )
    await asyncio.wait_for(gateway.run(stop), 5)
    assert inbound.commands == [{"command": "/parley"}]
    assert ws.sent == [{"envelope_id": "E1", "payload": {"text": "on it"}}]
