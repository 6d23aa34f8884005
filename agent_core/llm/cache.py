"""Response cache in Redis (opt-in: RESPONSE_CACHE_ENABLED).

The key is the SHA-256 of the model, the messages, max tokens, temperature and
stop sequences.  Requests with tools are never cached (their answers act on
the world), nor are answers with tool calls or without text.  Entries expire
after ``ttl_secs``; beyond ``max_entries`` the least recently used go first
(a ZSET of last-use times, trimmed after each write).  A hit costs nothing:
its usage is zero.  If Redis misbehaves the cache steps aside, never failing
the call.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.llm.base import (
    Completion,
    CompletionRequest,
    LLMProvider,
    StreamItem,
    TextDelta,
    TokenUsage,
)
from agent_core.llm.wrapper import Wrapper, aclose

log = logging.getLogger(__name__)

PREFIX = "parley:llmcache:"


def entry_key(digest: str) -> str:
    """STRING: the cached Completion JSON, with the TTL."""
    return f"{PREFIX}entry:{digest}"


def lru_key() -> str:
    """ZSET digest -> last-use time (seconds)."""
    return f"{PREFIX}lru"


def request_digest(request: CompletionRequest, model: str) -> str:
    """SHA-256 over what determines the answer."""
    messages = [
        [
            m.role,
            m.content,
            [c.to_dict() for c in m.tool_calls],
            m.tool_call_id,
            m.name,
            [[i.mime, hashlib.sha256(i.data_b64.encode()).hexdigest()] for i in m.images],
        ]
        for m in request.messages
    ]
    blob = orjson.dumps(
        {
            "model": model,
            "messages": messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "stop": list(request.stop),
            "reasoning_effort": request.reasoning_effort,
        },
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(blob).hexdigest()


def _dump(c: Completion) -> bytes:
    return orjson.dumps(
        {"text": c.text, "model": c.model, "finish_reason": c.finish_reason, "provider": c.provider}
    )


def _load(raw: bytes | str) -> Completion:
    d: dict[str, Any] = orjson.loads(raw)
    return Completion(
        text=d["text"],
        usage=TokenUsage(),
        model=d.get("model", ""),
        finish_reason=d.get("finish_reason", ""),
        provider=f"cache({d.get('provider', '')})",
    )


class ResponseCache(Wrapper):
    def __init__(
        self,
        inner: LLMProvider,
        redis: Redis,
        ttl_secs: int = 3600,
        max_entries: int = 1000,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(inner)
        self.redis = redis
        self.ttl_secs = ttl_secs
        self.max_entries = max_entries
        self._clock = clock
        self.hits = 0
        self.misses = 0

    def _digest(self, request: CompletionRequest) -> str | None:
        if request.tools:
            return None
        return request_digest(request, request.model or self.inner.model_info().name)

    async def get(self, digest: str) -> Completion | None:
        try:
            raw = await self.redis.get(entry_key(digest))
            if raw is None:
                self.misses += 1
                return None
            await self.redis.zadd(lru_key(), {digest: self._clock()})
        except RedisError as exc:
            log.warning("response cache unavailable (%s); calling the model", type(exc).__name__)
            return None
        self.hits += 1
        return _load(raw)

    async def put(self, digest: str, completion: Completion) -> None:
        if completion.tool_calls or not completion.text:
            return
        now = self._clock()
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(entry_key(digest), _dump(completion), ex=self.ttl_secs)
                pipe.zadd(lru_key(), {digest: now})
                pipe.zremrangebyscore(lru_key(), "-inf", now - self.ttl_secs)
                pipe.zcard(lru_key())
                *_, size = await pipe.execute()
            if size > self.max_entries:
                evicted = cast(
                    "list[tuple[bytes | str, float]]",
                    await self.redis.zpopmin(lru_key(), size - self.max_entries),
                )
                if evicted:
                    await self.redis.delete(*(entry_key(_s(d)) for d, _ in evicted))
        except RedisError as exc:
            log.warning("response cache write failed (%s)", type(exc).__name__)

    async def complete(self, request: CompletionRequest) -> Completion:
        digest = self._digest(request)
        if digest is None:
            return await self.inner.complete(request)
        hit = await self.get(digest)
        if hit is not None:
            return hit
        result = await self.inner.complete(request)
        await self.put(digest, result)
        return result

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        digest = self._digest(request)
        hit = await self.get(digest) if digest is not None else None
        if hit is not None:
            yield TextDelta(hit.text)
            yield hit
            return
        it = self.inner.stream(request)
        try:
            async for item in it:
                if isinstance(item, Completion) and digest is not None:
                    await self.put(digest, item)
                yield item
        finally:
            await aclose(it)


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v
