"""Building redis-py asyncio clients from settings.

Two clients share one server:

* ``redis``    the general client (pool, default socket timeout);
* ``blocking`` for ``XREADGROUP BLOCK`` / ``XREAD BLOCK`` only: no socket
  timeout, so a long block is not mistaken for a dead connection (redis-py 8
  sets a 5 s socket timeout by default).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, TimeoutError
from redis.retry import Retry

from agent_core.errors import ConfigError

SOCKET_TIMEOUT = 5.0


def redact_url(url: str) -> str:
    """The URL without its password, for logs and the start-up summary."""
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    user = f"{parts.username}:***@" if parts.username else "***@"
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def _kwargs(url: str, tls_insecure: bool) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "retry": Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=3),
        "retry_on_error": [RedisConnectionError, TimeoutError],
        "health_check_interval": 30,
    }
    if url.startswith("rediss://") and tls_insecure:
        # Heroku Redis presents a self-signed certificate; verification cannot
        # succeed, so it is turned off only when the operator says so.
        kw["ssl_cert_reqs"] = ssl.CERT_NONE
        kw["ssl_check_hostname"] = False
    return kw


@dataclass
class RedisClients:
    url: str
    redis: Redis
    blocking: Redis

    async def close(self) -> None:
        await self.redis.aclose()
        await self.blocking.aclose()


def make_clients(url: str, *, tls_insecure: bool = False, max_connections: int = 200) -> RedisClients:
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ValueError("scheme")
        if parts.scheme != "unix" and not parts.hostname:
            raise ValueError("host")
        _ = parts.port  # raises ValueError on a non-numeric port
    except ValueError:
        raise ConfigError(
            [
                f"REDIS_URL: {redact_url(url)!r} is not a Redis URL "
                "(expected redis://[:password@]host:port[/db], rediss://… or unix:///path)"
            ]
        ) from None
    kw = _kwargs(url, tls_insecure)
    redis = Redis.from_url(
        url,
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        max_connections=max_connections,
        **kw,
    )
    if parts.scheme != "unix":
        kw["socket_keepalive"] = True
    blocking = Redis.from_url(
        url,
        socket_timeout=None,
        socket_connect_timeout=SOCKET_TIMEOUT,
        max_connections=max_connections,
        **kw,
    )
    return RedisClients(url, redis, blocking)


async def check_reachable(clients: RedisClients) -> None:
    """PING once; a failure becomes one clear ConfigError line."""
    try:
        await clients.redis.ping()
    except RedisError as exc:
        reason = str(exc).split("\n")[0][:200] or type(exc).__name__
        raise ConfigError(
            [
                f"REDIS_URL: cannot reach {redact_url(clients.url)} ({reason}); "
                "check the URL and that the server runs, or unset REDIS_URL to use the "
                "embedded server"
            ]
        ) from None
