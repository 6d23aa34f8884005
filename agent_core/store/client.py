"""Building redis-py asyncio clients from settings.

Two clients (two pools) share one server:

* ``redis``    the general client; its ``wire`` round trips (the hot path) share
  one pipelined connection (``multiplex.py``), its other commands use the pool;
* ``blocking`` for ``XREADGROUP BLOCK`` / ``XREAD BLOCK`` only, so long blocking
  reads never starve the general pool.

Neither sets a socket (read) timeout.  redis-py 8 defaults to 5 s, which is
wrong for blocking reads, and it implements the timeout by wrapping every read
in ``asyncio.timeout``, which on Python 3.11 swallows the cancellation of the
task doing the read (measured: a cancelled task kept running its Redis loop),
so a worker could not stop a turn at shutdown.  Dead connections are found
instead by TCP keepalive (idle 10 s, 3 probes 5 s apart: ~25 s), by
``TCP_USER_TIMEOUT`` (25 s of data unacknowledged, where the platform has it),
redis-py's health check, and the connect timeout.

Neither retries a command.  A command whose connection broke may have run without
its reply arriving (an INCRBY of a spend counter, an XADD, a script), and redis-py
would send it again on a fresh connection.  The error goes to the caller instead,
whose own recovery is idempotent: the message stays in the stream for the worker,
a webhook is answered 503 and delivered again, the next command connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import ssl
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from agent_core.errors import ConfigError
from agent_core.settings import DB_PATH_PROBLEM, redis_db_path_ok
from agent_core.store import keys
from agent_core.store.wire import close_shared, share_connection

log = logging.getLogger(__name__)

SOCKET_TIMEOUT = 5.0  # connect timeout
POOL_WAIT = 10.0  # seconds a command waits for a pooled connection
# the start-up PING: a server that accepts the connection and never answers (no
# read timeout, see above) would otherwise hang `parley release`, `run`, `doctor`
PING_TIMEOUT = 10.0
_KEEPALIVE: dict[int, int] = {
    k: v
    for k, v in (
        (getattr(socket, "TCP_KEEPIDLE", -1), 10),
        (getattr(socket, "TCP_KEEPINTVL", -1), 5),
        (getattr(socket, "TCP_KEEPCNT", -1), 3),
        # data sent and not acknowledged for 25 s: the peer is gone (keepalive only
        # probes an idle connection, and the shared connection is rarely idle)
        (getattr(socket, "TCP_USER_TIMEOUT", -1), 25_000),
    )
    if k >= 0
}


# scheme://userinfo@rest: the userinfo runs to the last "@" before the host, so a
# password holding "@" or "/" is still hidden (over-redacting an "@" in a path is fine)
_USERINFO = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>.*)@(?P<rest>[^@]*)$", re.S
)


# redis-py also logs in with a password given in the query: ?password=...
_QUERY_PASSWORD = re.compile(r"(?P<key>[?&]password=)(?P<value>[^&#]*)", re.I)


def redact_url(url: str) -> str:
    """The URL without its credentials, for logs, `parley doctor` and the start-up
    summary: ``user:pass@`` -> ``user:***@``, a lone ``secret@`` -> ``***@``,
    ``?password=...`` -> ``?password=***``.  Never raises, whatever the URL looks like."""
    url = _QUERY_PASSWORD.sub(lambda q: q["key"] + "***", url)
    m = _USERINFO.match(url)
    if m is None:
        return url
    user, colon, _ = m["info"].partition(":")
    shown = f"{user}:***" if colon and user else "***"
    return f"{m['scheme']}{shown}@{m['rest']}"


def url_secrets(url: str) -> list[str]:
    """The secret parts of ``url`` (its userinfo's password, or a lone user name,
    which Redis and proxies take as the password; a ``?password=``), as given and
    decoded, for the log redaction filter.  Never raises."""
    found = [q["value"] for q in _QUERY_PASSWORD.finditer(url)]
    m = _USERINFO.match(_QUERY_PASSWORD.sub("", url))
    if m is not None:
        user, colon, password = m["info"].partition(":")
        found.append(password if colon else user)
    return [v for v in {*found, *(unquote(s) for s in found)} if v]


def _kwargs(url: str, tls_insecure: bool) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "retry": Retry(NoBackoff(), retries=0),  # never send a command twice (above)
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
        await close_shared(self.redis)
        await self.redis.aclose()
        await self.blocking.aclose()
        await self.redis.connection_pool.disconnect()
        await self.blocking.connection_pool.disconnect()


SHUTDOWN_STEP_SECS = 2.0  # one Redis call on the way out (see bounded)


async def bounded(aw: Awaitable[object], what: str, secs: float = SHUTDOWN_STEP_SECS) -> None:
    """One step of a shutdown, given ``secs``: with no read timeout (above) a Redis
    that stopped answering would hold the process past Heroku's 30 s (SIGKILL).
    Giving up is one warning line; a failure is ignored (the process is going)."""
    try:
        await asyncio.wait_for(aw, max(secs, 0.1))
    except TimeoutError:
        log.warning("shutdown: %s took over %.1f s (Redis not answering?); skipped", what, secs)
    except Exception as exc:
        log.debug("shutdown: %s failed: %s", what, type(exc).__name__)


def connections_per_process(max_connections: int, max_blocking_connections: int) -> int:
    """The most connections one process opens to Redis: both pools full, and the
    connection the general client's round trips share (opened outside its pool)."""
    return max_connections + max_blocking_connections + 1


async def server_max_clients(redis: Any) -> int | None:
    """The server's ``maxclients``: from ``INFO clients`` (Redis 7+, Valkey), else
    ``CONFIG GET``; None when neither says (managed services often refuse CONFIG)."""
    value: Any = None
    with contextlib.suppress(RedisError):
        value = (await redis.info("clients")).get("maxclients")
    if value is None:
        try:
            value = (await redis.config_get("maxclients")).get("maxclients")
        except RedisError:
            return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def make_clients(
    url: str,
    *,
    tls_insecure: bool = False,
    max_connections: int = 200,
    max_blocking_connections: int = 1000,
) -> RedisClients:
    """The two clients (see the module docstring).  ``max_connections`` caps the
    general pool (REDIS_MAX_CONNECTIONS), ``max_blocking_connections`` the pool of
    blocking reads (REDIS_MAX_BLOCKING_CONNECTIONS: a worker's consumer holds one,
    each open web chat page one on the web process); at a cap a command waits for a
    free connection (up to POOL_WAIT) instead of opening another."""
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
    if not redis_db_path_ok(parts):
        raise ConfigError([f"REDIS_URL: {redact_url(url)!r}: {DB_PATH_PROBLEM}"])
    kw = _kwargs(url, tls_insecure)
    if parts.scheme != "unix":
        kw["socket_keepalive"] = True
        kw["socket_keepalive_options"] = _KEEPALIVE
    # Blocking pools: a burst beyond max_connections waits for a free
    # connection (up to POOL_WAIT) instead of failing with "Too many connections".
    try:
        pool = BlockingConnectionPool.from_url(
            url,
            socket_timeout=None,
            socket_connect_timeout=SOCKET_TIMEOUT,
            max_connections=max_connections,
            timeout=POOL_WAIT,
            **kw,
        )
        blocking_pool = BlockingConnectionPool.from_url(
            url,
            socket_timeout=None,
            socket_connect_timeout=SOCKET_TIMEOUT,
            max_connections=max_blocking_connections,  # SSE followers, consumers
            timeout=POOL_WAIT,
            **kw,
        )
    except (ValueError, TypeError) as exc:  # a query argument redis-py refuses
        raise ConfigError([f"REDIS_URL: {_options_problem(exc)}"]) from None
    redis = Redis(connection_pool=pool)
    blocking = Redis(connection_pool=blocking_pool)
    share_connection(redis)  # the hot path's round trips share one connection
    return RedisClients(url, redis, blocking)


def _options_problem(exc: Exception) -> str:
    reason = str(exc).split("\n")[0][:200] or type(exc).__name__
    return (
        f"an option in the URL is refused ({type(exc).__name__}: {reason}); remove it "
        "(TLS options such as ssl_cert_reqs need rediss://)"
    )


async def _ping_once(redis: Redis) -> None:
    """PING on a connection of its own, with the pool's options.  PING_TIMEOUT counts
    from the moment the socket is up: connecting (SOCKET_TIMEOUT an attempt, times
    any retries) fails with its own error, a blackholed host's included; a
    server that accepts the connection but does not answer the handshake or the
    PING raises TimeoutError after PING_TIMEOUT."""
    conn = redis.connection_pool.make_connection()  # type: ignore[no-untyped-call]

    async def answered() -> None:
        await conn.connect()
        await conn.send_command("PING")
        await conn.read_response()

    task = asyncio.ensure_future(answered())
    loop = asyncio.get_running_loop()
    deadline: float | None = None
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=0.1)
            if deadline is None and conn.is_connected:
                deadline = loop.time() + PING_TIMEOUT
            if deadline is not None and loop.time() >= deadline and not task.done():
                task.cancel()
                await asyncio.wait({task})
                raise TimeoutError
        task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
        with contextlib.suppress(Exception):
            await conn.disconnect(nowait=True)


async def check_reachable(clients: RedisClients) -> None:
    """PING once (answered within PING_TIMEOUT); a failure becomes one clear
    ConfigError line."""
    try:
        await _ping_once(clients.redis)
    except TimeoutError:
        raise ConfigError(
            [
                f"REDIS_URL: cannot reach {redact_url(clients.url)} (no answer in "
                f"{PING_TIMEOUT:g} s); check that the URL points at a Redis server and "
                "that the server is not stuck"
            ]
        ) from None
    except (ValueError, TypeError) as exc:  # the connection refuses a URL query argument
        raise ConfigError([f"REDIS_URL: {_options_problem(exc)}"]) from None
    except RedisError as exc:
        reason = str(exc).split("\n")[0][:200] or type(exc).__name__
        if "CERTIFICATE_VERIFY_FAILED" in reason or "certificate verify failed" in reason:
            hint = (
                "the server's certificate is not trusted; for a self-signed one "
                "(Heroku Redis) set REDIS_TLS_INSECURE=true"
            )
        elif os.environ.get("DYNO"):
            # on Heroku an unset REDIS_URL is refused (each dyno would get its own)
            hint = (
                "check the Heroku Redis add-on (heroku redis:info) and that REDIS_URL is "
                "the URL it sets (heroku config:get REDIS_URL; a copy set by hand goes "
                "stale when Heroku rotates the credentials)"
            )
        else:
            hint = (
                "check the URL and that the server runs, or unset REDIS_URL to use the "
                "embedded server"
            )
        raise ConfigError(
            [f"REDIS_URL: cannot reach {redact_url(clients.url)} ({reason}); {hint}"]
        ) from None


# What a server that answers PING but refuses Parley's writes says, and the fix.
_REFUSALS = {
    "OOM": (
        "the server is full and evicts nothing (maxmemory, noeviction policy): free "
        "memory or move to a larger plan (heroku redis:info)"
    ),
    "NOPERM": (
        "the Redis user lacks a permission Parley needs (SET, EVAL/EVALSHA, XGROUP and "
        "the other stream commands on parley:* keys): use a user with +@all ~*"
    ),
    "READONLY": "this is a read-only replica: point REDIS_URL at the primary",
    "MISCONF": (
        "the server refuses writes because it cannot save its snapshot: see its log (disk full?)"
    ),
}
PROBE_KEY = keys.PREFIX + "probe"
_PROBE_SCRIPT = "redis.call('SET', KEYS[1], ARGV[1], 'PX', 1000) return 1"


def refused(url: str, exc: ResponseError) -> ConfigError | None:
    """A write refusal (OOM, NOPERM, READONLY, MISCONF) as one REDIS_URL line; None
    for any other error (a bug, not a setting)."""
    text = str(exc).split("\n")[0][:200]
    # redis-py turns "-OOM …" into OutOfMemoryError("…"), keeping the code aside
    code = str(getattr(exc, "status_code", None) or text.split(" ", 1)[0]).upper()
    hint = _REFUSALS.get(code)
    if hint is None:
        return None
    reason = text if text.upper().startswith(code) else f"{code} {text}"
    return ConfigError([f"REDIS_URL: {redact_url(url)} refuses writes ({reason}); {hint}"])


async def check_writable(clients: RedisClients) -> None:
    """What every process does first, tried once: a SET (expiring in 1 s), a script,
    and the inbox's consumer group (XGROUP CREATE MKSTREAM; already there is fine).
    A server that answers PING but refuses them (full with noeviction, an ACL user
    without XGROUP or EVAL, a read-only replica) is one ConfigError line, not a
    traceback from every dyno."""
    try:
        await clients.redis.set(PROBE_KEY, "x", px=1000)
        await clients.redis.register_script(_PROBE_SCRIPT)(keys=[PROBE_KEY], args=["x"])
        try:
            await clients.redis.xgroup_create(
                keys.INBOX_STREAM, keys.INBOX_GROUP, id="0", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
    except ResponseError as exc:
        problem = refused(clients.url, exc)
        if problem is None:
            raise
        raise problem from None
