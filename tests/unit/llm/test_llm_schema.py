"""Strict-mode schemas, tool-name and id repair, flattening, orphaned results."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent_core.llm.base import ChatMessage, ToolCall
from agent_core.llm.schema import (
    fix_tool_calls,
    flatten_tools,
    merge_user_runs,
    normalize_tool_name,
    safe_tool_name,
    sanitize_tool_messages,
    strict_schema,
    tool_call_id,
    wire_history,
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


def test_generated_ids_are_unique() -> None:
    """A call without an id gets a new one every time: the same call in two rounds
    used to get the same id, which Anthropic refuses ("`tool_use` ids must be unique")."""
    ids = {tool_call_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(i.startswith("call_") and len(i) <= 40 for i in ids)
    calls = fix_tool_calls([ToolCall("", "proxy_t", {}), ToolCall("keep", "t", {})], ["t"])
    assert calls[0].id.startswith("call_") and calls[0].name == "t"
    assert calls[1].id == "keep"
    again = fix_tool_calls([ToolCall("", "t", {})], ["t"])
    assert again[0].id != fix_tool_calls([ToolCall("", "t", {})], ["t"])[0].id
    # a server that gives every call of one answer the same id
    same = fix_tool_calls([ToolCall("call_0", "t", {}), ToolCall("call_0", "t", {"x": 1})])
    assert same[0].id == "call_0" and same[1].id not in ("call_0", "")


def test_unsafe_tool_names_are_made_safe() -> None:
    assert safe_tool_name("search") == "search"
    assert safe_tool_name("multi_tool_use.parallel") == "multi_tool_use_parallel"
    assert safe_tool_name("") == "unknown_tool"
    assert safe_tool_name("a" * 70) == "a" * 64
    assert safe_tool_name("fünf tools") == "f_nf_tools"
    calls = fix_tool_calls([ToolCall("c1", "functions.search", {}), ToolCall("c2", "", {})])
    assert [c.name for c in calls] == ["functions_search", "unknown_tool"]


def test_the_parallel_wrapper_is_unpacked() -> None:
    """gpt-4o sometimes calls its internal wrapper instead of the tools."""
    args: dict[str, Any] = {
        "tool_uses": [
            {"recipient_name": "functions.search", "parameters": {"q": "a"}},
            {"recipient_name": "functions.current_time"},
        ]
    }
    calls = fix_tool_calls([ToolCall("call_p", "multi_tool_use.parallel", args)], ["search"])
    assert [(c.name, c.arguments) for c in calls] == [("search", {"q": "a"}), ("current_time", {})]
    assert len({c.id for c in calls}) == 2 and all(c.id for c in calls)
    # not of that shape: kept as one call, under a name the APIs accept
    odd = fix_tool_calls([ToolCall("call_p", "multi_tool_use.parallel", {"x": 1})])
    assert [(c.id, c.name) for c in odd] == [("call_p", "multi_tool_use_parallel")]


def _round(cid: str, name: str = "t", result: str = "r") -> list[ChatMessage]:
    return [
        ChatMessage("assistant", "", (ToolCall(cid, name, {}),)),
        ChatMessage("tool", result, tool_call_id=cid, name=name),
    ]


def test_wire_history_renames_repeated_ids_with_their_results() -> None:
    """Sessions stored with the old made-up ids (same call, same id) recover."""
    h = [
        ChatMessage("user", "a"),
        *_round("call_x", result="first"),
        ChatMessage("user", "b"),
        *_round("call_x", result="second"),
        ChatMessage("user", "c"),
    ]
    out = wire_history(h)
    ids = [c.id for m in out for c in m.tool_calls]
    assert ids == ["call_x", "call_x_2"]
    assert [(m.tool_call_id, m.content) for m in out if m.role == "tool"] == [
        ("call_x", "first"),
        ("call_x_2", "second"),
    ]
    assert wire_history(h) == out  # the same every time (prompt caching)
    ok = [ChatMessage("user", "a"), *_round("c1"), ChatMessage("user", "b")]
    assert wire_history(ok) == tuple(ok)


def test_wire_history_pairs_results_with_calls_sharing_an_id_in_one_answer() -> None:
    """Two calls of one answer with the same id (old sessions, a server that gave
    every call one id), each with its result: the calls are told apart and each
    result answers its own call, in order.  Before, the first result was sent for
    the second call, the second dropped, and the first call left unanswered: every
    request refused until /new."""
    both = (
        ToolCall("call_0", "weather", {"c": "Paris"}),
        ToolCall("call_0", "weather", {"c": "Rome"}),
    )
    h = [
        ChatMessage("user", "weather in Paris and Rome"),
        ChatMessage("assistant", "", both),
        ChatMessage("tool", "Paris: sun", tool_call_id="call_0", name="weather"),
        ChatMessage("tool", "Rome: rain", tool_call_id="call_0", name="weather"),
        ChatMessage("tool", "Rome again", tool_call_id="call_0", name="weather"),  # a third
        ChatMessage("tool", "lost", tool_call_id="call_9", name="weather"),  # no such call
        ChatMessage("user", "thanks"),
    ]
    out = wire_history(h)
    assert [c.id for m in out for c in m.tool_calls] == ["call_0", "call_0_2"]
    assert [(m.tool_call_id, m.content) for m in out if m.role == "tool"] == [
        ("call_0", "Paris: sun"),
        ("call_0_2", "Rome: rain"),
        ("call_9", "lost"),  # no call: passed on as it is
    ]
    assert wire_history(h) == out  # the same every time (prompt caching)
    # an earlier answer's call left unanswered: results after the latest answer
    # with that id answer that answer's calls
    later = [
        ChatMessage("user", "a"),
        ChatMessage("assistant", "", (ToolCall("call_0", "t", {}),)),
        ChatMessage("user", "b"),
        ChatMessage("assistant", "", both),
        ChatMessage("tool", "one", tool_call_id="call_0", name="weather"),
        ChatMessage("tool", "two", tool_call_id="call_0", name="weather"),
    ]
    out = wire_history(later)
    assert [c.id for m in out for c in m.tool_calls] == ["call_0", "call_0_2", "call_0_3"]
    assert [m.tool_call_id for m in out if m.role == "tool"] == ["call_0_2", "call_0_3"]


def test_wire_history_drops_a_second_result_and_fixes_names() -> None:
    h = [
        ChatMessage("user", "a"),
        *_round("c1", name="multi_tool_use.parallel"),
        ChatMessage("tool", "again", tool_call_id="c1", name="t"),
        ChatMessage("user", "b"),
    ]
    out = wire_history(h)
    assert [m.role for m in out] == ["user", "assistant", "tool", "user"]
    assert out[1].tool_calls[0].name == "multi_tool_use_parallel"
    assert out[2].content == "r"


def test_wire_history_shortens_long_ids_consistently() -> None:
    long_a, long_b = "fc_" + "a" * 50, "fc_" + "a" * 49 + "b"
    h = [ChatMessage("user", "a"), *_round(long_a), *_round(long_b)]
    out = wire_history(h, id_limit=40)
    calls = [c.id for m in out for c in m.tool_calls]
    results = [m.tool_call_id for m in out if m.role == "tool"]
    assert calls == results and len(set(calls)) == 2
    assert all(len(i) <= 40 for i in calls)
    assert wire_history(h) == tuple(h)  # no limit: kept


def test_merge_user_runs() -> None:
    img = (object(),)  # any image part: only carried along
    h = [
        ChatMessage("system", "s"),
        ChatMessage("user", "first"),
        ChatMessage("user", "second", images=img),  # type: ignore[arg-type]
        ChatMessage("assistant", "ok"),
        ChatMessage("user", "third"),
    ]
    out = merge_user_runs(h)
    assert [m.role for m in out] == ["system", "user", "assistant", "user"]
    assert out[1].content == "first\n\nsecond" and out[1].images == img
    assert merge_user_runs(h[3:]) == tuple(h[3:])


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
