"""The tool registry: typed tools by name, their specs computed once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from agent_core.llm.base import ToolSpec
from agent_core.llm.schema import null_as_absent
from agent_core.tools.base import Tool

# agent_core.llm.schema.parse_arguments keeps arguments that are not valid JSON
# under this key (the tools' own argument models forbid unknown keys, so no tool
# has a field of that name)
RAW_KEY = "_raw"
RAW_SHOWN = 200  # characters of the broken text quoted back to the model


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool[Any]] = ()) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        self._specs: dict[str, ToolSpec] = {}
        for t in tools:
            self.add(t)

    def add(self, tool: Tool[Any]) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool
        self._specs[tool.name] = ToolSpec(tool.name, tool.description, tool.parameters())

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self, only: Sequence[str] | None = None) -> tuple[ToolSpec, ...]:
        """Specs in registration order; ``only`` limits them (a profile's tool set)."""
        if only is None:
            return tuple(self._specs.values())
        return tuple(self._specs[n] for n in only if n in self._specs)

    def parse_args(self, name: str, arguments: dict[str, Any]) -> BaseModel:
        """Validate raw LLM arguments; raises ValueError with a short readable message.

        Arguments that were not valid JSON (cut short, say) arrive as
        ``{RAW_KEY: text}``: refused as such, never run with the defaults."""
        tool = self._tools[name]
        if RAW_KEY in arguments:
            raw = str(arguments[RAW_KEY])
            shown = raw if len(raw) <= RAW_SHOWN else raw[:RAW_SHOWN] + f"… ({len(raw)} chars)"
            raise ValueError(
                f"arguments were not valid JSON: {shown!r}; "
                "call the tool again with one complete JSON object"
            )
        if set(arguments) == {"value"} and "value" not in tool.args_model.model_fields:
            # parse_arguments' wrapping of JSON that was not an object (a list, a string)
            raise ValueError(
                f"arguments must be a JSON object of this tool's parameters, "
                f"not {type(arguments['value']).__name__}"
            )
        try:
            args = null_as_absent(arguments, self._specs[name].parameters)
            return tool.args_model.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {_msg(e)}"
                for e in exc.errors(include_url=False)
            )
            raise ValueError(problems) from None

    async def initialize(self) -> None:
        for t in self._tools.values():
            await t.initialize()

    async def shutdown(self) -> None:
        for t in self._tools.values():
            await t.shutdown()


def _msg(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown argument (not in this tool's parameters)"
    return str(error["msg"])
