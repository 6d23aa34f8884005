"""The embedded Valkey: persistent across restarts, shared by two processes on one data dir."""

from __future__ import annotations

from pathlib import Path

from agent_core.store.client import make_clients
from agent_core.store.embedded import EmbeddedValkey, socket_path_for


async def test_second_process_on_the_same_dir_joins_the_running_server(tmp_path: Path) -> None:
    first = EmbeddedValkey(tmp_path / "data")
    await first.start()
    second = EmbeddedValkey(tmp_path / "data")
    await second.start()
    try:
        assert first.started_here and not second.started_here
        assert "shared" in second.describe()
        a, b = make_clients(first.url), make_clients(second.url)
        await a.redis.set("k", "v")
        assert await b.redis.get("k") == b"v"
        await a.close()
        await b.close()
    finally:
        await second.stop()  # does not stop a server it did not start
        await first.stop()


async def test_data_survives_a_restart(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path / "data")
    await server.start()
    c = make_clients(server.url)
    await c.redis.rpush("history", "hello")
    await c.close()
    await server.stop()  # SIGTERM: the AOF is flushed
    again = EmbeddedValkey(tmp_path / "data")
    await again.start()
    try:
        assert again.started_here
        c = make_clients(again.url)
        assert await c.redis.lrange("history", 0, -1) == [b"hello"]
        info = await c.redis.info("persistence")
        assert int(info["aof_enabled"]) == 1
        await c.close()
    finally:
        await again.stop()


def test_long_data_dirs_get_a_short_socket_path(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 120)
    path = socket_path_for(deep)
    assert len(str(path)) <= 100
    assert socket_path_for(deep) == path  # stable: a second process finds the same socket


async def test_a_joined_process_starts_the_server_again_when_its_starter_exits(
    tmp_path: Path,
) -> None:
    """Two `parley run` on one data dir: closing the first (which started the
    server) must not leave the second without Redis."""
    import asyncio

    first = EmbeddedValkey(tmp_path / "data")
    await first.start()
    second = EmbeddedValkey(tmp_path / "data", watch=True)
    await second.start()
    assert not second.started_here
    c = make_clients(second.url)
    try:
        await c.redis.rpush("history", "kept")
        await c.close()
        await first.stop()  # the starter exits: SIGTERM, AOF flushed
        for _ in range(50):
            await asyncio.sleep(0.1)
            if second.started_here:
                break
        assert second.started_here
        c = make_clients(second.url)
        assert await c.redis.lrange("history", 0, -1) == [b"kept"]
    finally:
        await c.close()
        await second.stop()
    assert not socket_path_for((tmp_path / "data").resolve()).exists()
