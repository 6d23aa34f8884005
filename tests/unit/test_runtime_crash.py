"""bots.runtime: a task of the process's role that ends before stop is a crash."""

from __future__ import annotations

import asyncio

from bots.runtime import Runtime


async def _sleep_forever() -> None:
    await asyncio.sleep(3600)


async def _fail_soon() -> None:
    await asyncio.sleep(0.01)
    raise RuntimeError("boom")


async def test_a_task_that_dies_first_stops_the_process_as_crashed() -> None:
    rt = Runtime.__new__(Runtime)  # only the supervision under test
    rt.crashed = False
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_sleep_forever()), asyncio.create_task(_fail_soon(), name="w")]
    await asyncio.wait_for(rt._until_stop_or_crash(stop, tasks), 5)
    assert stop.is_set() and rt.crashed
    tasks[0].cancel()


async def _return_at_once() -> None:  # e.g. a scheduler that is switched off
    return None


async def test_a_normal_stop_is_not_a_crash() -> None:
    rt = Runtime.__new__(Runtime)
    rt.crashed = False
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_sleep_forever()), asyncio.create_task(_return_at_once())]
    asyncio.get_running_loop().call_later(0.01, stop.set)
    await asyncio.wait_for(rt._until_stop_or_crash(stop, tasks), 5)
    assert not rt.crashed
    tasks[0].cancel()


async def test_a_gateway_that_returns_before_stop_is_a_crash(redis: object) -> None:
    """A gateway that just ends (a poller giving up) would leave a process that looks
    alive and hears nothing from that platform: it fails the gateway task instead,
    so the process exits 1 and is restarted."""
    import pytest

    from bots.runtime import GatewayEnded

    class _Channel:
        name = "quiet"
        gateway_lease = "quiet"

        async def run_gateway(self, ingest: object, stop: asyncio.Event) -> None:
            return None  # gave up

    class _Clients:
        pass

    clients = _Clients()
    clients.redis = redis  # type: ignore[attr-defined]
    rt = Runtime.__new__(Runtime)
    rt.clients, rt.ingest = clients, object()  # type: ignore[assignment]
    with pytest.raises(GatewayEnded):
        await asyncio.wait_for(rt._run_gateway(_Channel(), asyncio.Event()), 10)  # type: ignore[arg-type]
