"""The base of every reliability wrapper: a provider that delegates to another."""

from __future__ import annotations

from collections.abc import AsyncIterator

from agent_core.llm.base import (
    Completion,
    CompletionRequest,
    LLMProvider,
    ModelInfo,
    StreamItem,
)


async def aclose(it: AsyncIterator[StreamItem]) -> None:
    """Close an async generator we stopped reading (frees its HTTP response)."""
    close = getattr(it, "aclose", None)
    if close is not None:
        await close()


class Wrapper:
    """Delegates everything to ``inner``; subclasses override what they change."""

    def __init__(self, inner: LLMProvider) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    async def initialize(self) -> None:
        await self.inner.initialize()

    async def shutdown(self) -> None:
        await self.inner.shutdown()

    def model_info(self, model: str | None = None) -> ModelInfo:
        return self.inner.model_info(model)

    async def complete(self, request: CompletionRequest) -> Completion:
        return await self.inner.complete(request)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        it = self.inner.stream(request)
        try:
            async for item in it:
                yield item
        finally:
            await aclose(it)

    async def list_models(self) -> list[str]:
        return await self.inner.list_models()
