"""Runtime plumbing: shared metrics, leases."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
import redis as sync_redis

from agent_core.metrics import Metrics
from agent_core.store import keys
from agent_core.store.embedded import EmbeddedValkey
from agent_core.store.lease import Lease, run_under_lease, stop_grace
from bots.gateway_watch import watch_gateways
from bots.metrics import render


async def test_metrics_from_two_processes_add_up_and_render(redis: Any) -> None:
    a, b = Metrics(), Metrics()
    a.inc("parley_events_in_total", channel="telegram")
    b.inc("parley_events_in_total", 2, channel="telegram")
    b.inc("parley_events_in_total", channel="slack")
    a.observe("parley_turn_seconds", 0.02)
    b.observe("parley_turn_seconds", 3.0)
    a.inc("parley_llm_cost_usd_total", 0.0015, model="gpt-4o")
    await a.flush(redis)
    await b.flush(redis)
    text = (await render(redis)).decode()
    assert 'parley_events_in_total{channel="telegram"} 3.0' in text
    assert 'parley_events_in_total{channel="slack"} 1.0' in text
    assert 'parley_turn_seconds_bucket{le="0.025"} 1.0' in text
    assert 'parley_turn_seconds_bucket{le="+Inf"} 2.0' in text
    assert "parley_turn_seconds_count 2.0" in text
    assert 'parley_llm_cost_usd_total{model="gpt-4o"} 0.0015' in text
    assert "parley_redis_up 1.0" in text
    assert "parley_inbox_length 0.0" in text
    # flushing again adds nothing new
    await a.flush(redis)
    assert 'parley_events_in_total{channel="telegram"} 3.0' in (await render(redis)).decode()


async def test_lease_has_one_holder_and_is_taken_over_when_the_holder_dies(redis: Any) -> None:
    stop = asyncio.Event()
    first = Lease(redis, "gateway:test", "one", ttl=0.6)
    second = Lease(redis, "gateway:test", "two", ttl=0.6)
    assert await first.acquire(stop)
    waiter = asyncio.create_task(second.acquire(stop, poll=0.05))
    await asyncio.sleep(0.5)
    assert not waiter.done(), "a second holder got the lease while the first was alive"
    # the first holder dies without releasing (its renewal task stops)
    assert first._task is not None
    first._task.cancel()
    assert await asyncio.wait_for(waiter, 3) is True
    assert await second.holder() == "two"
    await second.release()
    assert await second.holder() is None


async def test_a_holder_that_loses_its_lease_is_told(redis: Any) -> None:
    stop = asyncio.Event()
    lease = Lease(redis, "gateway:x", "me", ttl=0.3)
    assert await lease.acquire(stop)
    await redis.set("parley:lease:gateway:x", "someone-else")
    await asyncio.wait_for(lease.lost.wait(), 2)
    await lease.release()
    assert await redis.get("parley:lease:gateway:x") == b"someone-else"


class _StallingProxy:
    """A TCP proxy to the test server that can stop forwarding (a Redis that stalls:
    a partition, a paused or overloaded server; no reset, the socket just hangs)."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}"

    async def _conn(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_unix_connection(self.socket_path)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                await self.flowing.wait()
                dst.write(data)
                await dst.drain()

        try:
            await asyncio.gather(pipe(r, uw), pipe(ur, w))
        except (ConnectionError, OSError):
            pass
        finally:
            w.close()
            uw.close()

    async def aclose(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_a_holder_whose_redis_stalls_gives_up_before_the_lease_can_be_taken(
    redis: Any, valkey: Any
) -> None:
    """The holder's Redis hangs (no error, no answer) while the other process still
    reaches it: the holder must consider the lease lost (and stop its connection)
    before the key expires and the other process takes it, never after."""
    from agent_core.store.client import make_clients

    proxy = _StallingProxy(str(valkey.socket_path))
    url = await proxy.start()
    cut_off = make_clients(url)
    try:
        stop = asyncio.Event()
        # a TTL of 3 s leaves the holder 0.6 s between giving up and the expiry
        first = Lease(cut_off.redis, "gateway:stall", "one", ttl=3.0)
        second = Lease(redis, "gateway:stall", "two", ttl=3.0)
        assert await first.acquire(stop)
        await asyncio.sleep(0.1)
        proxy.flowing.clear()  # the holder's Redis stops answering
        assert await second.acquire(stop, poll=0.02)
        assert first.lost.is_set(), (
            "the other process took the lease while the stalled holder still believed "
            "it held it (two gateway connections at once)"
        )
        await second.release()
    finally:
        proxy.flowing.set()
        await asyncio.wait_for(first.release(), 5)
        await cut_off.close()
        await proxy.aclose()


async def test_a_dead_holders_lease_is_taken_over_once_it_expires(redis: Any) -> None:
    """A SIGKILLed holder neither renews nor releases: a standby takes the lease over
    once it expires, never before (deploy/scaling.md: within TTL + TTL/15)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    ttl = 1.5
    first = Lease(redis, "gateway:dead", "one", ttl=ttl)
    second = Lease(redis, "gateway:dead", "two", ttl=ttl)
    assert await first.acquire(stop)
    died = loop.time()
    assert first._task is not None
    first._task.cancel()  # SIGKILL: no more renewals, no release
    assert await asyncio.wait_for(second.acquire(stop), 10)
    assert loop.time() - died >= ttl - 0.05  # not while the dead holder's lease ran
    assert second.poll_interval == ttl / 15  # the standby looked every TTL/15
    await second.release()


async def test_a_released_lease_is_taken_over_within_a_fifteenth_of_the_ttl(redis: Any) -> None:
    """A SIGTERMed holder releases its lease; the standby takes it within TTL/15 (1 s
    for the gateway), not at its next look a third of the TTL later."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # a TTL of 6 s: the standby looks every 0.4 s (every 2 s before), so taking over
    # within 1.2 s tells the two apart with room for a busy machine
    first = Lease(redis, "gateway:bye", "one", ttl=6.0)
    second = Lease(redis, "gateway:bye", "two", ttl=6.0)
    assert await first.acquire(stop)
    waiter = asyncio.create_task(second.acquire(stop))
    await asyncio.sleep(0.05)  # the standby looked and found it held
    await first.release()
    released = loop.time()
    assert await asyncio.wait_for(waiter, 5)
    took = loop.time() - released
    assert took <= 1.2, f"taken over {took:.2f} s after the release"
    await second.release()


async def test_a_gateway_that_ignores_its_stop_is_cancelled_when_the_lease_is_lost(
    redis: Any,
) -> None:
    """The lease is taken from under a gateway whose connection does not stop when
    told (a hung close): it is cancelled, so it cannot run alongside the new
    holder's, and once the lease is free again it is taken back and run again."""
    stop = asyncio.Event()
    runs: list[str] = []
    cancelled = asyncio.Event()
    second_run = asyncio.Event()
    leases: list[Lease] = []

    def make() -> Lease:
        leases.append(Lease(redis, "gateway:stuck", "me", ttl=0.6))
        return leases[-1]

    async def run(inner: asyncio.Event) -> None:
        runs.append("run")
        if len(runs) == 2:
            second_run.set()
            await inner.wait()
            return
        try:
            await asyncio.Event().wait()  # ignores ``inner``
        except asyncio.CancelledError:
            cancelled.set()
            raise

    holder = asyncio.create_task(run_under_lease(make, run, stop))
    while not runs:
        await asyncio.sleep(0.01)
    await redis.set("parley:lease:gateway:stuck", "someone-else")  # taken over
    await asyncio.wait_for(cancelled.wait(), 10)
    assert not second_run.is_set()
    await redis.delete("parley:lease:gateway:stuck")  # the other holder goes away
    await asyncio.wait_for(second_run.wait(), 10)
    assert len(leases) == 2 and leases[0].lost.is_set()
    stop.set()
    await asyncio.wait_for(holder, 10)
    assert await redis.get("parley:lease:gateway:stuck") is None  # released on stop


async def test_a_run_told_its_lease_is_lost_has_a_fraction_of_the_margin_to_finish(
    redis: Any,
) -> None:
    """What a gateway may still spend acknowledging what it took before closing its
    connection (Slack Socket Mode): the full grace when the process stops, a quarter
    of the lease's margin when the lease is lost (cancelled at 0.8 of it)."""
    graces: list[float] = []

    async def run(inner: asyncio.Event) -> None:
        graces.append(stop_grace(inner, 5.0))
        await inner.wait()
        graces.append(stop_grace(inner, 5.0))

    lease = Lease(redis, "gateway:grace", "me", ttl=0.6)
    stop = asyncio.Event()
    holder = asyncio.create_task(run_under_lease(lambda: lease, run, stop))
    while not graces:
        await asyncio.sleep(0.01)
    await redis.set("parley:lease:gateway:grace", "someone-else")  # taken over
    while len(graces) < 2:
        await asyncio.sleep(0.01)
    assert graces == [5.0, lease.margin / 4]
    stop.set()
    await redis.delete("parley:lease:gateway:grace")
    await asyncio.wait_for(holder, 10)


async def test_a_gateway_that_fails_raises_and_releases_its_lease(redis: Any) -> None:
    """A gateway that crashes is not retried here: the error reaches the runtime,
    which restarts the process; the lease is released for the next holder."""

    async def run(inner: asyncio.Event) -> None:
        raise RuntimeError("gateway crashed")

    def make() -> Lease:
        return Lease(redis, "gateway:crash", "me", ttl=5.0)

    try:
        await asyncio.wait_for(run_under_lease(make, run, asyncio.Event()), 10)
    except RuntimeError as exc:
        assert str(exc) == "gateway crashed"
    else:
        raise AssertionError("the gateway's error was swallowed")
    assert await redis.get("parley:lease:gateway:crash") is None


async def test_a_cancelled_holder_stops_its_gateway_and_releases_the_lease(redis: Any) -> None:
    """Cancelled from outside (an event loop torn down by Ctrl-C), the holder must not
    leave its gateway running with the lease renewed by nobody's wish."""
    running = asyncio.Event()
    gateway_cancelled = asyncio.Event()

    async def run(inner: asyncio.Event) -> None:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            gateway_cancelled.set()
            raise

    def make() -> Lease:
        return Lease(redis, "gateway:cancel", "me", ttl=60.0)

    holder = asyncio.create_task(run_under_lease(make, run, asyncio.Event()))
    await asyncio.wait_for(running.wait(), 10)
    holder.cancel()
    await asyncio.gather(holder, return_exceptions=True)
    assert holder.cancelled()
    assert gateway_cancelled.is_set(), "the gateway ran on after its holder was cancelled"
    assert await redis.get("parley:lease:gateway:cancel") is None, "the lease was kept"


async def test_a_holder_resuming_from_a_pause_longer_than_its_lease_stops_before_acting(
    redis: Any, valkey: EmbeddedValkey
) -> None:
    """What the operator saw: a gateway process paused longer than the 15 s lease
    (a long GC pause, a frozen VM, SIGSTOP) lost its lease to a standby, and on
    resuming went on for a moment as if it still held it: its gateway's short
    sleeps ran before the lease's keeper could notice, so the old Telegram poller
    sent one more getUpdates and the new holder got a 409 and went quiet for 30 s.

    The paused holder's run must stop before its next step: its stop reads as set
    as soon as the lease is not surely its own (``Lease.valid``), without Redis."""
    ttl = 1.5
    key = keys.lease("gateway:paused")
    acted: list[tuple[float, str | None]] = []  # (when, the holder then) of each step
    # blocking calls: nothing else runs on the loop between the pause and the take-over
    sync = sync_redis.Redis.from_url(valkey.url)

    async def gateway(inner: asyncio.Event) -> None:
        # a gateway's loop: one step (read a frame, one getUpdates) at a time
        while not inner.is_set():
            await asyncio.sleep(0.05)
            if inner.is_set():
                break
            holder = sync.get(key)
            acted.append((time.monotonic(), holder.decode() if holder else None))

    stop = asyncio.Event()
    task = asyncio.create_task(
        run_under_lease(lambda: Lease(redis, "gateway:paused", "A", ttl=ttl), gateway, stop)
    )
    for _ in range(100):
        if await redis.get(key) == b"A":
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(ttl)  # A holds and runs, renewing
    assert await redis.get(key) == b"A"

    time.sleep(ttl * 1.6)  # A's process is paused: its loop does nothing  # noqa: ASYNC251 (the pause itself)
    # meanwhile the standby B took the lease (its Lease.try_acquire: SET NX PX)
    assert sync.set(key, "B", nx=True, px=int(ttl * 1000))
    resumed = time.monotonic()

    await asyncio.sleep(ttl)
    stop.set()
    await asyncio.wait_for(task, 10)
    after = [h for t, h in acted if t >= resumed]
    assert "B" not in after, f"A's gateway ran {after.count('B')} step(s) while B held it"


async def test_lease_valid_while_renewed_and_not_after_its_hold(redis: Any) -> None:
    lease = Lease(redis, "gateway:valid", "me", ttl=0.6)
    assert not lease.valid()  # not taken yet
    assert await lease.acquire(asyncio.Event())
    try:
        assert lease.valid()
        await asyncio.sleep(0.9)  # past the TTL, renewed meanwhile
        assert lease.valid() and not lease.lost.is_set()
        time.sleep(0.7)  # paused past the hold  # noqa: ASYNC251
        assert not lease.valid()
        await asyncio.sleep(0.05)  # the keeper's overdue turn
        assert lease.lost.is_set()
    finally:
        await lease.release()


async def test_a_worker_warns_once_when_no_process_holds_a_needed_gateway(
    redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """What the operator saw: Discord configured, no gateway process running (app.json
    starts none): the workers ran on without a word and the bot never answered.  A
    worker's look-out warns once per episode (two checks in a row without a holder),
    and says when a process holds the gateway again."""
    stop = asyncio.Event()
    key = keys.lease("gateway:discord")

    def said(text: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if text in r.getMessage()]

    async def until(text: str, count: int = 1) -> None:
        for _ in range(500):
            if len(said(text)) >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"never logged {text!r}")

    async def checks(n: int) -> None:  # n more EXISTS of the lease key
        before = len(exists)
        for _ in range(500):
            if len(exists) >= before + n:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the look-out stopped checking")

    exists: list[str] = []
    real = redis.exists

    async def counted(*names: str) -> int:
        exists.extend(names)
        return int(await real(*names))

    redis.exists = counted
    with caplog.at_level(logging.INFO, logger="bots.gateway_watch"):
        task = asyncio.create_task(
            watch_gateways(
                redis, {"discord": "discord"}, stop, on_heroku=True, grace=0.01, interval=0.02
            )
        )
        try:
            await until("no process holds the discord gateway")
            await checks(4)  # still missing: no second warning
            [line] = said("no process holds the discord gateway")
            assert line.levelno == logging.WARNING
            assert "heroku ps:scale gateway=1" in line.getMessage()
            await redis.set(key, "gateway.1")  # a gateway process connected
            await until("the discord gateway is held again")
            await redis.delete(key)  # and went away again: a new episode
            await until("no process holds the discord gateway", 2)
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)
            del redis.exists
    assert set(exists) == {key}  # one EXISTS per check, nothing else


async def test_gateway_up_renders_as_a_labelled_gauge(redis: Any) -> None:
    body = (await render(redis, {"parley_gateway_up|channel=discord": 0.0})).decode()
    assert 'parley_gateway_up{channel="discord"} 0.0' in body


async def test_a_run_stopped_by_a_doubtful_hold_is_started_again(redis: Any) -> None:
    """The run stops as soon as its hold is not surely ours; if the keeper's renewal
    then answers after all (the lease was never lost), run_under_lease returned and
    the process ran on with no gateway at all.  Now it takes the lease back."""
    doubtful = {"on": False}

    class Doubted(Lease):
        def valid(self) -> bool:
            return not doubtful["on"] and super().valid()

    runs: list[int] = []

    async def gateway(inner: asyncio.Event) -> None:
        runs.append(1)
        while not inner.is_set():
            await asyncio.sleep(0.02)

    stop = asyncio.Event()
    task = asyncio.create_task(
        run_under_lease(lambda: Doubted(redis, "gateway:doubt", "A", ttl=0.6), gateway, stop)
    )
    for _ in range(200):
        if runs:
            break
        await asyncio.sleep(0.02)
    doubtful["on"] = True  # the gateway stops at its next step
    await asyncio.sleep(0.1)
    doubtful["on"] = False  # and the hold was ours all along
    await asyncio.sleep(0.3)
    assert not task.done() and len(runs) >= 2  # it runs again, under the lease
    assert await redis.get("parley:lease:gateway:doubt") == b"A"
    stop.set()
    await asyncio.wait_for(task, 10)
