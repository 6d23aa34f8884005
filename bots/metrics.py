"""`/metrics`: the shared counters from Redis plus live gauges, via prometheus-client;
with ``METRICS_TOKEN`` set, only for a request that carries the token."""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, Response
from starlette.types import Scope

from agent_core.metrics import DESCRIPTIONS, parse_field
from agent_core.store import keys

log = logging.getLogger(__name__)

# shorter METRICS_TOKENs get a warning (at start, from doctor and release)
MIN_TOKEN_CHARS = 16
# at most one log line per this many seconds about refused requests
REFUSAL_LOG_SECS = 60.0
_now = time.monotonic  # the clock of that (a test moves it)
UNAUTHORIZED = (
    "/metrics needs the METRICS_TOKEN: send Authorization: Bearer <token>, "
    "or basic auth with the token as the password.\n"
)

GAUGE_HELP = {
    "parley_gateway_up": "1 while a process holds the channel's gateway connection (its lease)",
}


class _Snapshot(Collector):
    def __init__(self, values: dict[str, float], gauges: dict[str, float]) -> None:
        self.values = values
        self.gauges = gauges

    def collect(self) -> Iterator[Metric]:
        plain: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        hist: dict[str, dict[tuple[tuple[str, str], ...], dict[str, Any]]] = defaultdict(dict)
        for field, v in self.values.items():
            name, labels = parse_field(field)
            for suffix in ("_bucket", "_sum", "_count"):
                base = name[: -len(suffix)]
                if name.endswith(suffix) and DESCRIPTIONS.get(base, ("",))[0] == "histogram":
                    le = labels.pop("le", None)
                    slot = hist[base].setdefault(
                        tuple(sorted(labels.items())), {"buckets": {}, "sum": 0.0}
                    )
                    if suffix == "_bucket" and le is not None:
                        slot["buckets"][le] = v
                    elif suffix == "_sum":
                        slot["sum"] = v
                    break
            else:
                plain[name].append((labels, v))
        for name, rows in sorted(plain.items()):
            help_ = DESCRIPTIONS.get(name, ("counter", name))[1]
            label_names = sorted({k for labels, _ in rows for k in labels})
            fam = CounterMetricFamily(name.removesuffix("_total"), help_, labels=label_names)
            for labels, v in rows:
                fam.add_metric([labels.get(k, "") for k in label_names], v)
            yield fam
        for name, series in sorted(hist.items()):
            label_names = sorted({k for key in series for k, _ in key})
            fam_h = HistogramMetricFamily(name, DESCRIPTIONS[name][1], labels=label_names)
            for key, slot in series.items():
                labels = dict(key)
                buckets = sorted(
                    slot["buckets"].items(),
                    key=lambda kv: float("inf") if kv[0] == "+Inf" else float(kv[0]),
                )
                fam_h.add_metric([labels.get(k, "") for k in label_names], buckets, slot["sum"])
            yield fam_h
        gauges: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for field, v in self.gauges.items():  # "name" or "name|label=value"
            name, labels = parse_field(field)
            gauges[name].append((labels, v))
        for name, rows in sorted(gauges.items()):
            label_names = sorted({k for labels, _ in rows for k in labels})
            g = GaugeMetricFamily(
                name, GAUGE_HELP.get(name, name.replace("_", " ")), labels=label_names
            )
            for labels, v in rows:
                g.add_metric([labels.get(k, "") for k in label_names], v)
            yield g


async def gather_gauges(redis: Redis) -> dict[str, float]:
    g: dict[str, float] = {}
    try:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.xlen(keys.INBOX_STREAM)
            pipe.zcard(keys.ACTIVE_THREADS)
            length, active = await pipe.execute()
        g["parley_inbox_length"] = float(length)
        g["parley_active_threads"] = float(active)
        try:
            info = await redis.xpending(keys.INBOX_STREAM, keys.INBOX_GROUP)
            g["parley_inbox_pending"] = float(info["pending"] if info else 0)
        except RedisError:
            g["parley_inbox_pending"] = 0.0
    except RedisError:
        g["parley_redis_up"] = 0.0
        return g
    g["parley_redis_up"] = 1.0
    return g


async def render(redis: Redis, extra_gauges: dict[str, float] | None = None) -> bytes:
    try:
        raw = await redis.hgetall(keys.METRICS)
    except RedisError:
        raw = {}
    values = {k.decode(): float(v) for k, v in raw.items()}
    gauges = await gather_gauges(redis)
    gauges.update(extra_gauges or {})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(values, gauges))
    return generate_latest(registry)


class TokenGate:
    """The gate of ``/metrics`` while ``METRICS_TOKEN`` is set: None for a request
    carrying the token (``Authorization: Bearer <token>``, or ``Basic`` with the
    token as the password and any user name: many scrapers and hosted agents only
    do basic auth), else a 401 with ``WWW-Authenticate: Bearer``.  Compared in
    constant time.  A refusal is logged at info, at most once a minute (a public
    port gets scanned), and never with what was presented (a token sent in the
    wrong place, as the scheme or the user name, must not end up in the log)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self._refused = 0
        self._logged_at: float | None = None

    def __call__(self, scope: Scope) -> Response | None:
        why = self._refusal(Headers(scope=scope).get("authorization"))
        if why is None:
            return None
        self._note(why)
        return PlainTextResponse(
            UNAUTHORIZED, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="metrics"'}
        )

    def _refusal(self, header: str | None) -> str | None:
        """None when ``header`` carries the token, else why not (no part of it)."""
        if header is None:
            return "no Authorization header"
        scheme, _, rest = header.strip().partition(" ")
        rest = rest.strip()
        if scheme.lower() == "bearer":
            given, wrong = rest.encode("latin-1"), "a wrong bearer token"
        elif scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(rest, validate=True)
            except (binascii.Error, ValueError):
                return "malformed basic credentials"
            _user, sep, given = decoded.partition(b":")
            if not sep:
                return "malformed basic credentials"
            wrong = "a wrong basic-auth password"
        else:
            return "an Authorization scheme other than Bearer or Basic"
        return None if hmac.compare_digest(given, self._token) else wrong

    def _note(self, why: str) -> None:
        self._refused += 1
        now = _now()
        if self._logged_at is not None and now - self._logged_at < REFUSAL_LOG_SECS:
            return
        log.info(
            "/metrics: refused %d request(s) without the METRICS_TOKEN since the last "
            "such line, the latest with %s (401; at most one line a minute)",
            self._refused,
            why,
        )
        self._refused, self._logged_at = 0, now


def short_token(token: str) -> str:
    """Why ``token`` (METRICS_TOKEN) is too short to keep /metrics private; "" if it is not."""
    if len(token) >= MIN_TOKEN_CHARS:
        return ""
    return (
        f"METRICS_TOKEN is {len(token)} characters long: use at least {MIN_TOKEN_CHARS} "
        "random ones (e.g. openssl rand -hex 32)"
    )
