"""HOST=:: listens for IPv4 clients too (dual stack), as it does elsewhere."""

from __future__ import annotations

import socket


def test_host_ipv6_wildcard_also_accepts_ipv4_clients() -> None:
    """README: HOST is the bind address "(IPv4 or IPv6, e.g. `::`)".  listen_on
    sets IPV6_V6ONLY on every IPv6 socket, so HOST=:: (a wildcard, dual-stack on
    Linux and in plain uvicorn) refuses every IPv4 client: Docker's port mapping,
    a proxy connecting to 127.0.0.1, the summary's own http://localhost:PORT/ for a
    browser that resolves localhost to 127.0.0.1."""
    from bots.runtime import listen_on

    socks = listen_on("::", 0)
    try:
        port = socks[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        for s in socks:
            s.close()
