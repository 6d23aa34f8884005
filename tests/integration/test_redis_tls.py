"""``rediss://`` as Heroku Redis serves it: TLS in front of the real Valkey (a TLS
terminator on loopback with a trustme certificate, ``valkey_proxy``), through
``make_clients``.

The hot path's round trips run on the shared connection (``multiplex.py``), which
takes over the TLS transport after redis-py's handshake; redis-py's own commands
use the pool.  Both must work on asyncio and on uvloop (what ``parley run`` uses).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from redis.exceptions import ConnectionError

from agent_core.store.client import check_reachable, make_clients
from agent_core.store.embedded import EmbeddedValkey
from agent_core.store.wire import _shared, call, roundtrip
from tests.integration.valkey_proxy import valkey_proxy


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    yield path


async def _hot_path_and_pool(url: str, tls_insecure: bool) -> list[Any]:
    clients = make_clients(url, tls_insecure=tls_insecure)
    try:
        await check_reachable(clients)  # redis-py's pooled path
        assert clients.redis in _shared
        replies = await asyncio.gather(
            *(roundtrip(clients.redis, [("INCR", "tls"), ("ECHO", f"c{i}")]) for i in range(50))
        )
        assert [echo for _, echo in replies] == [f"c{i}".encode() for i in range(50)]
        assert sorted(n for n, _ in replies) == list(range(1, 51))
        await clients.redis.set("via-pool", "1")
        return [await call(clients.redis, "GET", "tls"), await call(clients.redis, "PING")]
    finally:
        await clients.close()


async def test_heroku_style_self_signed_with_tls_insecure(
    valkey: EmbeddedValkey, server_context: ssl.SSLContext, redis: Any
) -> None:
    async with valkey_proxy(valkey, tls=server_context) as seen:
        port = seen["port"]
        got = await _hot_path_and_pool(f"rediss://:pw@127.0.0.1:{port}/0", tls_insecure=True)
    assert got == [b"50", b"PONG"]


async def test_a_verified_certificate(
    valkey: EmbeddedValkey, server_context: ssl.SSLContext, ca_file: Path, redis: Any
) -> None:
    url_base = "rediss://localhost:{port}/0?ssl_ca_certs=" + str(ca_file)
    async with valkey_proxy(valkey, tls=server_context) as seen:
        port = seen["port"]
        got = await _hot_path_and_pool(url_base.format(port=port), tls_insecure=False)
    assert got == [b"50", b"PONG"]


async def test_an_untrusted_certificate_is_refused_on_the_shared_connection_too(
    valkey: EmbeddedValkey, server_context: ssl.SSLContext
) -> None:
    async with valkey_proxy(valkey, tls=server_context) as seen:
        port = seen["port"]
        clients = make_clients(f"rediss://localhost:{port}/0")
        try:
            with pytest.raises(ConnectionError, match=r"(?i)certificate"):
                await call(clients.redis, "PING")
        finally:
            await clients.close()


def test_on_uvloop(valkey: EmbeddedValkey, server_context: ssl.SSLContext) -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> list[Any]:
        async with valkey_proxy(valkey, tls=server_context) as seen:
            port = seen["port"]
            clients = make_clients(f"rediss://127.0.0.1:{port}/0", tls_insecure=True)
            await clients.redis.delete("tls")
            await clients.close()
            return await _hot_path_and_pool(f"rediss://127.0.0.1:{port}/0", tls_insecure=True)

    assert uvloop.run(main()) == [b"50", b"PONG"]
