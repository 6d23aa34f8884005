"""The Redis response cache: hit, miss, never for tools, TTL and LRU eviction."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry as RedisRetry
from redis.backoff import NoBackoff

from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from agent_core.llm.cache import ResponseCache, entry_key, lru_key, request_digest
from tests.fakes.llm_servers import FakeClock, ScriptedProvider


def req(text: str, **kw: object) -> CompletionRequest:
    return CompletionRequest((ChatMessage("user", text),), **kw)  # type: ignore[arg-type]


async def test_miss_then_hit(redis: Redis) -> None:
    inner = ScriptedProvider("openai:gpt-4o", Completion("Paris", provider="openai:gpt-4o"))
    cache = ResponseCache(inner, redis)
    first = await cache.complete(req("capital of France?"))
    second = await cache.complete(req("capital of France?"))
    assert first.text == second.text == "Paris"
    assert len(inner.calls) == 1
    assert second.usage.total == 0  # a hit costs nothing
    assert (cache.hits, cache.misses) == (1, 1)
    digest = request_digest(req("capital of France?"), "gpt-4o")
    assert await redis.exists(entry_key(digest))
    assert entry_key(digest).startswith("parley:llmcache:")


async def test_key_depends_on_model_temperature_max_tokens_stop(redis: Redis) -> None:
    inner = ScriptedProvider("openai:gpt-4o")
    cache = ResponseCache(inner, redis)
    variants = [
        req("q"),
        req("q", model="gpt-4o-mini"),
        req("q", temperature=0.5),
        req("q", max_tokens=10),
        req("q", stop=("x",)),
        req("q2"),
    ]
    for r in variants:
        await cache.complete(r)
    assert len(inner.calls) == len(variants)


async def test_never_for_tools_or_tool_call_answers(redis: Redis) -> None:
    tool = ToolSpec("search", "", {"type": "object"})
    inner = ScriptedProvider(
        "openai:gpt-4o",
        Completion("", (ToolCall("c1", "search", {}),)),
        Completion("", (ToolCall("c2", "search", {}),)),
    )
    cache = ResponseCache(inner, redis)
    await cache.complete(req("q", tools=(tool,)))
    await cache.complete(req("q", tools=(tool,)))
    assert len(inner.calls) == 2
    assert await redis.zcard(lru_key()) == 0
    # an answer made of tool calls is not stored either
    inner.outcomes.append(Completion("", (ToolCall("c3", "x", {}),)))
    await cache.complete(req("no tools offered"))
    assert await redis.zcard(lru_key()) == 0


async def test_stream_hit_replays_text_then_completion(redis: Redis) -> None:
    inner = ScriptedProvider(
        "openai:gpt-4o", [TextDelta("Par"), TextDelta("is"), Completion("Paris")]
    )
    cache = ResponseCache(inner, redis)
    first = [i async for i in cache.stream(req("capital?"))]
    second = [i async for i in cache.stream(req("capital?"))]
    assert first[-1].text == "Paris"
    assert second[0] == TextDelta("Paris")
    assert isinstance(second[-1], Completion) and second[-1].text == "Paris"
    assert len(inner.calls) == 1


async def test_ttl_expiry(redis: Redis) -> None:
    inner = ScriptedProvider("openai:gpt-4o")
    cache = ResponseCache(inner, redis, ttl_secs=60)
    await cache.complete(req("q"))
    digest = request_digest(req("q"), "gpt-4o")
    assert 0 < await redis.ttl(entry_key(digest)) <= 60


async def test_lru_eviction_keeps_recently_used(redis: Redis) -> None:
    clock = FakeClock()
    inner = ScriptedProvider("openai:gpt-4o")
    cache = ResponseCache(inner, redis, max_entries=3, clock=clock)
    for q in ("a", "b", "c"):
        await cache.complete(req(q))
        clock.advance(1)
    await cache.complete(req("a"))  # a is now the most recently used
    clock.advance(1)
    await cache.complete(req("d"))  # evicts b, the least recently used
    assert await redis.zcard(lru_key()) == 3
    assert not await redis.exists(entry_key(request_digest(req("b"), "gpt-4o")))
    calls = len(inner.calls)
    await cache.complete(req("a"))
    await cache.complete(req("c"))
    assert len(inner.calls) == calls  # both still cached
    await cache.complete(req("b"))
    assert len(inner.calls) == calls + 1


async def test_redis_down_steps_aside() -> None:
    broken = Redis(host="127.0.0.1", port=1, retry=RedisRetry(NoBackoff(), 0))
    inner = ScriptedProvider("openai:gpt-4o")
    cache = ResponseCache(inner, broken)
    assert (await cache.complete(req("q"))).text == "ok"
    await broken.aclose()
