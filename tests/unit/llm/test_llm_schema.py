"""Strict-mode schemas, tool-name and id repair, flattening, orphaned results."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent_core.llm.base import ChatMessage, ToolCall
from agent_core.llm.schema import (
    fix_tool_calls,
    flatten_tools,
    normalize_tool_name,
    sanitize_tool_messages,
    strict_schema,
    tool_call_id,
)

NESTED = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "default": "x"},
        "filters": {
            "type": "object",
            "properties": {
                "since": {"type": "string"},
                "tags": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "weight": {"type": "number"}},
                        "required": ["name"],
                    },
                },
                "mode": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "ref": {"$ref": "#/$defs/Ref"},
            },
            "required": ["since"],
        },
    },
    "required": ["query"],
    "$defs": {"Ref": {"type": "object", "properties": {"id": {"type": "integer"}}}},
}


def test_strict_schema_nested_optional_fields() -> None:
    s = strict_schema(NESTED)
    assert s["additionalProperties"] is False
    assert s["required"] == ["query", "filters"]
    assert s["properties"]["query"] == {"type": "string"}  # required: not nullable, no default
    filters = s["properties"]["filters"]
    assert filters["type"] == ["object", "null"]  # was optional
    assert filters["additionalProperties"] is False
    assert filters["required"] == ["since", "tags", "mode", "ref"]
    assert filters["properties"]["since"] == {"type": "string"}
    tags = filters["properties"]["tags"]
    assert tags["type"] == ["array", "null"]
    item = tags["items"]
    assert item["required"] == ["name", "weight"]
    assert item["properties"]["weight"]["type"] == ["number", "null"]
    assert item["additionalProperties"] is False
    assert filters["properties"]["mode"]["anyOf"][-1] == {"type": "null"}
    assert filters["properties"]["ref"] == {"anyOf": [{"$ref": "#/$defs/Ref"}, {"type": "null"}]}
    ref = s["$defs"]["Ref"]
    assert ref["required"] == ["id"] and ref["additionalProperties"] is False
    assert NESTED["properties"]["query"] == {"type": "string", "default": "x"}  # input untouched


def test_proxy_prefix() -> None:
    assert normalize_tool_name("proxy_search", ["search"]) == "search"
    assert normalize_tool_name("proxy_search") == "search"
    assert normalize_tool_name("proxy_tool", ["proxy_tool"]) == "proxy_tool"
    assert normalize_tool_name("search", ["search"]) == "search"


def test_generated_ids_are_stable_and_distinct() -> None:
    a = tool_call_id("search", {"q": "x"}, 0)
    assert a == tool_call_id("search", {"q": "x"}, 0)
    assert a != tool_call_id("search", {"q": "x"}, 1)
    calls = fix_tool_calls([ToolCall("", "proxy_t", {}), ToolCall("keep", "t", {})], ["t"])
    assert calls[0].id.startswith("call_") and calls[0].name == "t"
    assert calls[1].id == "keep"


def test_flatten_tools() -> None:
    msgs = (
        ChatMessage("user", "find"),
        ChatMessage("assistant", "ok", (ToolCall("c1", "search", {"q": "a"}),)),
        ChatMessage("tool", "found a", tool_call_id="c1", name="search"),
    )
    flat = flatten_tools(msgs)
    assert flat[1] == ChatMessage("assistant", 'ok\n[called tool search with {"q":"a"}]')
    assert flat[2] == ChatMessage("user", "[result of tool search]\nfound a")
    assert all(not m.tool_calls and m.role != "tool" for m in flat)


def test_sanitize_orphans() -> None:
    msgs = (
        ChatMessage("user", "go"),
        ChatMessage("tool", "orphan", tool_call_id="gone", name="t"),
        ChatMessage("assistant", "", (ToolCall("c1", "t", {}), ToolCall("c2", "t", {"x": 1}))),
        ChatMessage("tool", "r1", tool_call_id="c1", name="t"),
    )
    out = sanitize_tool_messages(msgs)
    assert out[1] == ChatMessage("user", "[result of tool t]\norphan")
    assert out[2].tool_calls == (ToolCall("c1", "t", {}),)  # c2 never answered
    assert "[called tool t with" in out[2].content
    assert out[3] == msgs[3]


_leaf = st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "boolean"}])
_schemas = st.recursive(
    _leaf,
    lambda children: st.one_of(
        st.builds(
            lambda props, req: {
                "type": "object",
                "properties": props,
                "required": [k for k in props if k in req],
            },
            st.dictionaries(st.sampled_from("abcdef"), children, max_size=4),
            st.sets(st.sampled_from("abcdef")),
        ),
        st.builds(lambda item: {"type": "array", "items": item}, children),
    ),
    max_leaves=12,
)


def _objects(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        if "properties" in node:
            found.append(node)
        for v in node.values():
            found += _objects(v)
    elif isinstance(node, list):
        for v in node:
            found += _objects(v)
    return found


@given(_schemas)
def test_strict_schema_closes_every_object(schema: dict[str, Any]) -> None:
    out = strict_schema(schema)
    for obj in _objects(out):
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    assert strict_schema(out) == out  # idempotent


def test_null_as_absent_drops_only_nulls_the_schema_does_not_allow() -> None:
    from pydantic import BaseModel

    from agent_core.llm.schema import null_as_absent

    class Inner(BaseModel):
        depth: int = 1
        label: str | None = "x"

    class Args(BaseModel):
        query: str
        limit: int = 10
        note: str | None = None
        inner: Inner = Inner()

    schema = Args.model_json_schema()
    got = null_as_absent(
        {"query": None, "limit": None, "note": None, "inner": {"depth": None, "label": None}},
        schema,
    )
    # a required field's null stays (and is refused by validation, as before); an
    # optional one that cannot be null means "not given"; a nullable one stays null
    assert got == {"query": None, "note": None, "inner": {"label": None}}
    assert Args.model_validate({**got, "query": "q"}).model_dump() == {
        "query": "q",
        "limit": 10,
        "note": None,
        "inner": {"depth": 1, "label": None},
    }
