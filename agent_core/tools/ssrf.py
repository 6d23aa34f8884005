"""Which addresses the ``http_request`` tool may reach.

Refused unless the host is listed in HTTP_TOOL_ALLOWED_HOSTS: loopback,
private (RFC 1918, ULA), link-local (including cloud metadata at
169.254.169.254 and fd00:ec2::254), carrier-grade NAT, multicast, reserved and
unspecified addresses — checked on every address the name resolves to, after
DNS resolution (done by the event loop's resolver thread, never blocking it),
and again on every redirect.

:func:`check_url` returns the addresses it checked, and the caller connects to
one of them rather than to the name: a second lookup at connection time could
answer differently (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_METADATA_NAMES = frozenset({"metadata.google.internal", "metadata", "instance-data"})


class Refused(Exception):
    """The URL points somewhere the tool must not go (message is safe to show)."""


def address_refused(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Why ``ip`` is off limits, or '' when it is a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        # IPv6 forms that carry an IPv4 address: judge the IPv4 one
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            ip = embedded
        elif ip.is_site_local:
            return "a site-local address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local (or cloud metadata) address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "a shared (carrier-grade NAT) address"
    if ip.is_private:
        return "a private address"
    if ip.is_multicast or ip.is_reserved or ip.is_unspecified:
        return "a reserved address"
    if not ip.is_global:
        return "not a public address"
    return ""


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    return host.lower().rstrip(".") in allowed


async def check_url(url: str, allowed: frozenset[str]) -> tuple[str, ...]:
    """Raise :class:`Refused` unless ``url`` is http(s) to a public host (or an allowed one).

    Returns the checked addresses the host name resolved to (in resolver order):
    connect to one of these, never to the name again.  Empty when no pinning is
    needed: the host is an address literal, or listed in ``allowed``.
    """
    try:
        parts = urlsplit(url)
        port = parts.port  # a port out of range or not a number raises here
        host = (parts.hostname or "").lower().rstrip(".")
    except ValueError as exc:  # also a malformed IPv6 literal ("http://[::1/")
        raise Refused(f"invalid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise Refused("only http and https URLs are allowed")
    if not host:
        raise Refused("the URL has no host")
    if host_allowed(host, allowed):
        return ()
    if host in _METADATA_NAMES:
        raise Refused(f"{host} is a cloud metadata service")
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        why = address_refused(literal)
        if why:
            raise Refused(f"{host} is {why}")
        return ()
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port or 0, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused(f"cannot resolve {host} ({exc})") from None
    checked: list[str] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        why = address_refused(ip)
        if why:
            raise Refused(f"{host} resolves to {ip}, {why}")
        if str(ip) not in checked:
            checked.append(str(ip))
    if not checked:
        raise Refused(f"cannot resolve {host} (no address)")
    return tuple(checked)
