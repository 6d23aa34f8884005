"""A null that OpenAI strict mode invites inside an optional sub-object or inside\nthe items of a list means "not given" there too."""

from __future__ import annotations

from pydantic import BaseModel

from agent_core.tools.base import Tool, ToolContext
from agent_core.tools.registry import ToolRegistry


class Filter(BaseModel):
    kind: str = "all"
    limit: int = 10


class Item(BaseModel):
    name: str
    note: str = ""


class SearchArgs(BaseModel):
    q: str
    filter: Filter | None = None  # the everyday optional sub-object
    items: list[Item] = []


class Search(Tool[SearchArgs]):
    name = "search"
    description = "search"
    args_model = SearchArgs

    async def run(self, args: SearchArgs, ctx: ToolContext) -> str:
        return ""


def test_strict_nulls_inside_an_optional_sub_object_read_as_absent() -> None:
    reg = ToolRegistry([Search()])
    args = reg.parse_args("search", {"q": "x", "filter": {"kind": "all", "limit": None}})
    assert args.filter.limit == 10  # type: ignore[attr-defined]


def test_strict_nulls_inside_array_items_read_as_absent() -> None:
    reg = ToolRegistry([Search()])
    args = reg.parse_args("search", {"q": "x", "items": [{"name": "a", "note": None}]})
    assert args.items[0].note == ""  # type: ignore[attr-defined]


def test_a_null_sub_object_itself_stays_null() -> None:
    reg = ToolRegistry([Search()])
    args = reg.parse_args("search", {"q": "x", "filter": None, "items": []})
    assert args.filter is None  # type: ignore[attr-defined]
