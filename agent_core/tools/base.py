"""The tool contract: a typed argument model, an approval policy, one ``run``.

A tool is a small class::

    class CurrentTime(Tool[TimeArgs]):
        name = "current_time"
        description = "The current date and time in a timezone."
        args_model = TimeArgs
        approval = Approval.NEVER

        async def run(self, args: TimeArgs, ctx: ToolContext) -> str:
            ...

The LLM sees ``name``, ``description`` and the JSON schema of ``args_model``.
What ``run`` returns is *data*: the loop caps it, marks it as tool output and
feeds it back to the model.  It can never end a turn or approve anything.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from agent_core.events import ThreadKey

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from agent_core.settings import CoreSettings


class Approval(StrEnum):
    NEVER = "never"
    ALWAYS = "always"


A = TypeVar("A", bound=BaseModel)

# never / always, or a predicate on the parsed arguments (True = needs approval)
ApprovalPolicy = Approval | Callable[[Any], bool]


class ToolError(Exception):
    """A tool failed in a way the LLM should hear about (message is shown to it)."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may use. No platform concepts."""

    redis: Redis
    settings: CoreSettings
    thread: ThreadKey
    user: str  # channel-qualified id of the person whose turn this is


class Tool(ABC, Generic[A]):
    name: ClassVar[str]
    description: ClassVar[str]
    args_model: ClassVar[type[BaseModel]]
    approval: ClassVar[ApprovalPolicy] = Approval.NEVER
    timeout: ClassVar[float | None] = None  # None: TOOL_TIMEOUT_SECS
    external: ClassVar[bool] = False  # brings in outside content: output is marked as data
    allow_always: ClassVar[bool] = True  # False: "Always" approves this call only

    def time_limit(self, settings: CoreSettings) -> float | None:
        """The limit the executor puts on one call; None: TOOL_TIMEOUT_SECS.  A tool
        with a setting of its own (SHELL_TOOL_TIMEOUT_SECS) answers from it."""
        return type(self).timeout

    def needs_approval(self, args: A) -> bool:
        policy = type(self).approval
        if policy is Approval.NEVER:
            return False
        if policy is Approval.ALWAYS:
            return True
        return bool(policy(args))

    def parameters(self) -> dict[str, Any]:
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            if isinstance(prop, dict):
                prop.pop("title", None)
        return schema

    async def initialize(self) -> None:
        """Open long-lived clients (called once at start)."""

    async def shutdown(self) -> None:
        """Close them."""

    @abstractmethod
    async def run(self, args: A, ctx: ToolContext) -> str:
        """Do the work; return text for the LLM. Raise ToolError for a clean failure."""
