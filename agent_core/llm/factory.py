"""Build the provider chain from settings, in one place.

::

    SmartRouting -> Retry -> CircuitBreaker -> ResponseCache -> Failover -> backend(s)

:data:`CHAIN` lists the wrappers outermost first (like Starlette's middleware
list); :func:`build_provider` folds it around the backends.  A layer that is
switched off (no cache, a single backend) is simply left out; SmartRouting is
always there so callers can ask it for :meth:`SmartRouting.cheap`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from redis.asyncio import Redis

from agent_core.errors import ConfigError
from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.base import LLMProvider
from agent_core.llm.breaker import CircuitBreaker
from agent_core.llm.cache import ResponseCache
from agent_core.llm.config import BackendConfig, backend_config
from agent_core.llm.demo import DemoProvider
from agent_core.llm.failover import Failover
from agent_core.llm.ollama import OllamaProvider
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from agent_core.llm.retry import Retry, Sleep
from agent_core.llm.routing import SmartRouting
from agent_core.llm.settings import LLMSettings
from agent_core.store.client import redact_url


@dataclass(frozen=True, slots=True)
class Context:
    """What the layers may need besides settings."""

    settings: LLMSettings
    redis: Redis | None
    sleep: Sleep = asyncio.sleep
    clock: Callable[[], float] = time.monotonic


Layer = Callable[[LLMProvider, Context], LLMProvider]


def _routing(p: LLMProvider, ctx: Context) -> LLMProvider:
    s = ctx.settings
    return SmartRouting(p, s.llm_cheap_model, s.smart_routing_cascade)


def _retry(p: LLMProvider, ctx: Context) -> LLMProvider:
    s = ctx.settings
    return Retry(p, s.llm_max_retries, max_retry_after=s.llm_retry_after_max_secs, sleep=ctx.sleep)


def _breaker(p: LLMProvider, ctx: Context) -> LLMProvider:
    s = ctx.settings
    return CircuitBreaker(
        p, s.circuit_breaker_threshold, s.circuit_breaker_recovery_secs, clock=ctx.clock
    )


def _cache(p: LLMProvider, ctx: Context) -> LLMProvider:
    s = ctx.settings
    if not s.response_cache_enabled or ctx.redis is None:
        return p
    return ResponseCache(p, ctx.redis, s.response_cache_ttl_secs, s.response_cache_max_entries)


# outermost first; the innermost layer (failover over the backends) is built apart
CHAIN: tuple[Layer, ...] = (_routing, _retry, _breaker, _cache)


def make_backend(
    config: BackendConfig,
    settings: LLMSettings,
    prices: PriceTable,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> LLMProvider:
    """One backend for ``config`` (the wire format is ``config.kind``)."""
    if config.kind == "anthropic":
        return AnthropicProvider(config, prices, transport, clock=clock)
    if config.kind == "ollama":
        return OllamaProvider(config, prices, transport, clock=clock)
    if config.kind == "openai":
        return OpenAIProvider(config, prices, transport, clock=clock)
    return DemoProvider(settings)


def backend_configs(settings: LLMSettings) -> list[BackendConfig]:
    """The primary backend, then each fallback, in failover order."""
    primary = backend_config(settings)
    configs = [primary]
    if settings.llm_fallback_model:
        configs.append(backend_config(settings, primary.backend, settings.llm_fallback_model))
    for backend, model in settings.fallbacks():
        configs.append(backend_config(settings, backend, model or None))
    return configs


def build_provider(
    settings: LLMSettings,
    redis: Redis | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> SmartRouting:
    """The whole chain for ``settings``; ``await provider.initialize()`` before use.

    Raises ConfigError (one line per missing key or URL) before anything starts.
    ``transport``, ``sleep`` and ``clock`` are for tests (a MockTransport, a fake clock).
    The result is an LLMProvider; ``.cheap()`` gives the provider for light work.
    """
    configs = backend_configs(settings)
    prices = PriceTable(settings.llm_prices_file)
    backends = [make_backend(c, settings, prices, transport, clock) for c in configs]
    provider: LLMProvider
    if len(backends) == 1:
        provider = backends[0]
    else:
        provider = Failover(
            backends,
            settings.llm_failover_threshold,
            settings.llm_failover_cooldown_secs,
            clock=clock,
        )
    ctx = Context(settings, redis, sleep, clock)
    for layer in reversed(CHAIN):
        provider = layer(provider, ctx)
    assert isinstance(provider, SmartRouting)
    return provider


def describe(settings: LLMSettings) -> str:
    """One line for the start-up summary: backend, model, where, and why. Never a key."""
    backend, why = settings.resolve_backend()
    try:
        cfg = backend_config(settings, backend)
    except ConfigError as exc:
        return f"{backend} (misconfigured: {'; '.join(exc.problems)}; {why})"
    where = f" at {redact_url(cfg.base_url)}" if cfg.base_url else ""  # user:key@ hidden
    extras = []
    if settings.llm_fallback_model:
        extras.append(f"fallback {settings.llm_fallback_model}")
    for b, m in settings.fallbacks():
        extras.append(f"fallback {b}" + (f":{m}" if m else ""))
    if settings.llm_cheap_model:
        extras.append(f"cheap model {settings.llm_cheap_model}")
    if settings.response_cache_enabled:
        extras.append("response cache on")
    tail = "; " + ", ".join(extras) if extras else ""
    return f"{backend} ({cfg.model}{where}; {why}){tail}"
