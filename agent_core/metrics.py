"""Process-wide counters, summed over every process through Redis.

Workers (which serve no HTTP on Heroku) count in memory; every few seconds each
process adds its deltas to one Redis hash (``parley:metrics``) in one pipeline.
The web process's ``/metrics`` (bots/metrics.py) reads the hash, adds live
gauges (queue depth, pending entries, active threads) and renders them with
prometheus-client.  Counting costs
no Redis round trip on the hot path.

Field form: ``name|label=value,label=value``.  Histograms are counters named
``<name>_bucket`` with an ``le`` label, plus ``_sum`` and ``_count``.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from redis.asyncio import Redis

from agent_core.store import keys

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# name -> (type, help)
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "parley_events_in_total": ("counter", "Inbound events accepted, by channel"),
    "parley_dedup_drops_total": ("counter", "Inbound events dropped as duplicates, by channel"),
    "parley_refused_total": ("counter", "Inbound events refused (rate limit, access), by reason"),
    "parley_turns_total": ("counter", "Turns completed, by outcome"),
    "parley_turn_seconds": ("histogram", "Turn latency (handoff to completion)"),
    "parley_llm_calls_total": ("counter", "LLM calls, by model"),
    "parley_llm_tokens_total": ("counter", "LLM tokens, by model and kind"),
    "parley_llm_cost_usd_total": ("counter", "LLM cost in USD, by model"),
    "parley_tool_runs_total": ("counter", "Tool runs, by tool and outcome"),
    "parley_approvals_total": ("counter", "Approvals asked and decided, by decision"),
    "parley_reclaims_total": ("counter", "Stream entries reclaimed from dead consumers"),
    "parley_worker_busy_seconds_total": (
        "counter",
        "Seconds workers held back from reading because their event loop lagged",
    ),
    "parley_budget_refusals_total": ("counter", "LLM calls refused by a budget, by kind"),
}


def _field(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name + "|"
    return name + "|" + ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, float] = defaultdict(float)

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        with self._lock:
            self._pending[_field(name, labels)] += value

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        with self._lock:
            for le in LATENCY_BUCKETS:
                if seconds <= le:
                    self._pending[_field(name + "_bucket", {**labels, "le": str(le)})] += 1
            self._pending[_field(name + "_bucket", {**labels, "le": "+Inf"})] += 1
            self._pending[_field(name + "_sum", labels)] += seconds
            self._pending[_field(name + "_count", labels)] += 1

    def take(self) -> dict[str, float]:
        with self._lock:
            out, self._pending = dict(self._pending), defaultdict(float)
        return out

    async def flush(self, redis: Redis) -> None:
        """Add this process's deltas to the shared hash (put them back on failure)."""
        deltas = self.take()
        if not deltas:
            return
        try:
            async with redis.pipeline(transaction=False) as pipe:
                for field, v in deltas.items():
                    pipe.hincrbyfloat(keys.METRICS, field, v)
                await pipe.execute()
        except Exception:  # not on cancellation: the pipeline may have been applied
            # (no transaction, no token); the runtime cancels a flush only in the
            # bounded last flush of a shutdown, when the process exits anyway
            with self._lock:
                for field, v in deltas.items():
                    self._pending[field] += v
            raise


METRICS = Metrics()


def parse_field(field: str) -> tuple[str, dict[str, str]]:
    name, _, rest = field.partition("|")
    labels: dict[str, str] = {}
    if rest:
        for part in rest.split(","):
            k, _, v = part.partition("=")
            labels[k] = v
    return name, labels
