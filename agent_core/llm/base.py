"""The LLM contract: one protocol every backend and every wrapper implements.

A provider is built from settings, ``initialize()``d once, then called many
times concurrently.  Wrappers (retry, circuit breaker, cache, failover, routing)
take a provider and are themselves providers, so reliability is composed by
wrapping, in one place (``agent_core.llm.factory``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolCall:
        return cls(d["id"], d["name"], d.get("arguments") or {})


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image for vision models: raw bytes, base64-encoded, with its mime type."""

    mime: str
    data_b64: str


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""  # for role == "tool"
    name: str = ""  # tool name for role == "tool"
    images: tuple[ImagePart, ...] = ()
    # a user-role message added inside a running turn (the loop's nudge, a message
    # taken in mid-turn): not the start of a turn, where compaction may cut
    mid_turn: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"r": self.role, "c": self.content}
        if self.mid_turn:
            d["mt"] = 1
        if self.tool_calls:
            d["tc"] = [t.to_dict() for t in self.tool_calls]
        if self.tool_call_id:
            d["id"] = self.tool_call_id
        if self.name:
            d["n"] = self.name
        # images are not persisted in history: they are re-fetched on demand
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChatMessage:
        return cls(
            role=d["r"],
            content=d.get("c", ""),
            tool_calls=tuple(ToolCall.from_dict(t) for t in d.get("tc", ())),
            tool_call_id=d.get("id", ""),
            name=d.get("n", ""),
            mid_turn=bool(d.get("mt")),
        )


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the LLM sees it: name, description and a JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens of one call.  ``input`` excludes cached tokens: the whole prompt is
    ``input + cache_read + cache_write`` (see :attr:`prompt`)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            self.total + other.total,
        )

    @property
    def prompt(self) -> int:
        """Every prompt token, cached or not (what fills the context window)."""
        return self.input + self.cache_read + self.cache_write


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    model: str | None = None  # None: the provider's configured model
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    # "low" | "medium" | "high": how much an OpenAI reasoning model (gpt-5, o3...)
    # thinks before answering; sent to those models only ("": the model's default)
    reasoning_effort: str = ""
    # opaque routing hints for failover: the conversation, and one turn of it (the
    # calls of a turn's tool loop stay on one provider while it is healthy)
    session_id: str = ""
    turn_id: str = ""
    # ``model`` was named by the user (/model): a provider that does not know it is
    # the request's problem (ModelNotAvailable raised), not a reason to fail over
    model_chosen: bool = False


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)
    model: str = ""
    finish_reason: str = ""
    provider: str = ""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of answer text as it streams."""

    text: str


# A stream yields TextDelta items and ends with exactly one Completion carrying
# the whole text, the assembled tool calls and the usage.
StreamItem = TextDelta | Completion


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    context_window: int = 100_000
    supports_tools: bool = True
    supports_vision: bool = False
    input_cost_per_token: float = 0.0  # USD
    output_cost_per_token: float = 0.0  # USD
    cache_read_cost_per_token: float = 0.0
    cache_write_cost_per_token: float = 0.0
    # an OpenAI reasoning model (o1, o3, o4-mini, gpt-5...): rejects temperature and stop
    reasoning: bool = False
    # the answer budget of a request that sets no max_tokens (the backend's
    # LLM_MAX_TOKENS); 0: not known.  The cost guard reserves this much answer.
    max_output_tokens: int = 0

    def cost(self, usage: TokenUsage) -> float:
        """USD cost of ``usage`` on this model.  Cached tokens of a model whose cache
        prices are not known (0) are billed as plain input: budgets err high."""
        inp = self.input_cost_per_token
        return (
            usage.input * inp
            + usage.output * self.output_cost_per_token
            + usage.cache_read * (self.cache_read_cost_per_token or inp)
            + usage.cache_write * (self.cache_write_cost_per_token or inp)
        )


@runtime_checkable
class LLMProvider(Protocol):
    """What the agent loop needs from a model."""

    @property
    def name(self) -> str:
        """A short label for logs and /status, e.g. 'openai:gpt-4o'."""
        ...

    async def initialize(self) -> None: ...

    async def shutdown(self) -> None: ...

    def model_info(self, model: str | None = None) -> ModelInfo:
        """Metadata (context window, prices) of ``model`` or the default model."""
        ...

    async def complete(self, request: CompletionRequest) -> Completion:
        """One whole answer (text and/or tool calls)."""
        ...

    def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        """Text deltas as they arrive, then one final Completion."""
        ...

    async def list_models(self) -> list[str]: ...
