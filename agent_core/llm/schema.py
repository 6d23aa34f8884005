"""Tool schemas and tool messages: what each backend needs to see.

* :func:`strict_schema` — OpenAI strict mode wants every object closed
  (``additionalProperties: false``) with every property required; a property that
  was optional becomes nullable instead.  Applied recursively.
  :func:`strict_expressible` says when a schema cannot be carried so, and
  :func:`null_as_absent` reads the nulls it invites back as "not given".
* :func:`normalize_tool_name` — some proxies prefix tool names with ``proxy_``.
* :func:`safe_tool_name` — a tool name as every API accepts it in a history
  (``^[a-zA-Z0-9_-]{1,64}$``): a model's invented ``multi_tool_use.parallel``
  or an empty name would otherwise get every later request refused.
* :func:`tool_call_id` — a unique id for a tool call that arrived without one.
* :func:`fix_tool_calls` — the calls of an answer as Parley keeps them: names
  made safe, gpt-4o's ``multi_tool_use.parallel`` unpacked, ids filled in.
* :func:`wire_history` — a stored history as a request may carry it: tool names
  made safe, repeated call ids renamed (with their results), a second result of
  one call dropped, over-long ids shortened; :func:`merge_user_runs` joins
  consecutive user messages.
* :func:`flatten_tools` — tool calls and results rewritten as text, for backends
  without tool support.
* :func:`sanitize_tool_messages` — tool results whose call is not in the history
  (after switching provider mid-conversation) become plain user text.
* :func:`drop_cut_calls` — an answer cut by the output limit keeps only the tool
  calls that arrived whole; the text says which call was cut and not run, or,
  for an answer of text only, that it was cut (:data:`LENGTH_NOTE`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import orjson

from agent_core.agent.fences import open_fence
from agent_core.llm.base import ChatMessage, ToolCall

# keywords OpenAI strict mode rejects
_UNSUPPORTED = ("default",)
_NESTED_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_NESTED_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` in OpenAI strict-mode form (see module doc)."""
    out: dict[str, Any] = _strict(schema)
    return out


def strict_expressible(schema: Any) -> bool:
    """Can strict mode carry ``schema``?  Not when an object takes free-form keys (a
    ``dict[str, str]`` such as http_request's headers): strict mode closes every
    object, so the model could send no key at all.  Such a tool goes without strict."""
    if isinstance(schema, list):
        return all(strict_expressible(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    extra = schema.get("additionalProperties")
    if extra is True or isinstance(extra, dict):
        return False
    return all(strict_expressible(v) for v in schema.values() if isinstance(v, dict | list))


def null_as_absent(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` without the nulls strict mode invites for optional properties
    (it makes them required and nullable): a ``null`` where the tool's own schema
    does not allow one means "not given", so the default applies.  Recursive into
    nested objects (``$ref`` to ``$defs`` resolved)."""
    defs: dict[str, Any] = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
        return node

    def allows_null(node: Any) -> bool:
        node = resolve(node)
        if not isinstance(node, dict):
            return True
        t = node.get("type")
        if t == "null" or (isinstance(t, list) and "null" in t):
            return True
        return any(allows_null(b) for b in node.get("anyOf", ()) if isinstance(b, dict))

    def shape(node: Any, kind: str) -> Any:
        """``node`` itself, or its ``anyOf`` branch, that is an object / an array
        (``Model | None`` is ``anyOf: [{$ref}, {type: null}]``)."""
        node = resolve(node)
        if not isinstance(node, dict):
            return None
        if node.get("type") == kind or (kind == "object" and "properties" in node):
            return node
        for branch in node.get("anyOf", ()):
            found = shape(branch, kind)
            if found is not None:
                return found
        return None

    def value_of(v: Any, node: Any) -> Any:
        if isinstance(v, dict) and (obj := shape(node, "object")) is not None:
            return walk(v, obj)
        if isinstance(v, list) and (arr := shape(node, "array")) is not None:
            return [value_of(item, arr.get("items")) for item in v]
        return v

    def walk(value: dict[str, Any], node: Any) -> dict[str, Any]:
        props = node.get("properties", {})
        required = set(node.get("required", ()))
        out: dict[str, Any] = {}
        for k, v in value.items():
            sub = props.get(k)
            if v is None and sub is not None and k not in required and not allows_null(sub):
                continue
            out[k] = value_of(v, sub) if sub is not None else v
        return out

    root = shape(schema, "object")
    return walk(arguments, root) if root is not None else arguments


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    t = schema.get("type")
    if isinstance(t, str):
        if t == "null":
            return schema
        return {**schema, "type": [t, "null"]}
    if isinstance(t, list):
        return schema if "null" in t else {**schema, "type": [*t, "null"]}
    if "anyOf" in schema:
        branches = schema["anyOf"]
        if any(isinstance(b, dict) and b.get("type") == "null" for b in branches):
            return schema
        return {**schema, "anyOf": [*branches, {"type": "null"}]}
    return {"anyOf": [schema, {"type": "null"}]}


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in _UNSUPPORTED:
            continue
        if k in _NESTED_MAPS and isinstance(v, dict):
            out[k] = {name: _strict(sub) for name, sub in v.items()}
        elif k in _NESTED_LISTS and isinstance(v, list):
            out[k] = [_strict(sub) for sub in v]
        elif k in ("items", "additionalItems", "not") and isinstance(v, dict):
            out[k] = _strict(v)
        else:
            out[k] = v
    t = out.get("type")
    is_object = t == "object" or (isinstance(t, list) and "object" in t) or "properties" in out
    if is_object:
        props: dict[str, Any] = out.get("properties", {})
        required = set(node.get("required", ()))
        out["properties"] = {
            name: sub if name in required else _nullable(sub) for name, sub in props.items()
        }
        out["required"] = list(props)
        out["additionalProperties"] = False
    return out


PROXY_PREFIX = "proxy_"


def normalize_tool_name(name: str, known: Iterable[str] = ()) -> str:
    """Drop a ``proxy_`` prefix a proxy added, unless a tool really has that name."""
    known_set = set(known)
    if name.startswith(PROXY_PREFIX) and name not in known_set:
        bare = name[len(PROXY_PREFIX) :]
        if not known_set or bare in known_set:
            return bare
    return name


# what OpenAI accepts as a function name, in tools and in a history's tool_calls
# (Anthropic's tool names: the same characters); 64 is OpenAI's limit for tools
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]")
UNKNOWN_TOOL = "unknown_tool"
# gpt-4o sometimes calls its internal parallel-call wrapper instead of the tools:
# {"tool_uses": [{"recipient_name": "functions.x", "parameters": {...}}, ...]}
PARALLEL_WRAPPER = "multi_tool_use.parallel"
# OpenAI refuses a history whose tool call id is longer ("Invalid
# 'messages[2].tool_calls[0].id': string too long. Expected a string with maximum
# length 40"); ids from other providers can be (Responses-style ``fc_...``: 53)
OPENAI_ID_LIMIT = 40


def safe_tool_name(name: str) -> str:
    """``name`` as every API accepts it in a history: characters outside
    ``[a-zA-Z0-9_-]`` become ``_``, cut to 64; an empty name is ``unknown_tool``.
    A valid name is kept."""
    if TOOL_NAME.fullmatch(name):
        return name
    return _NOT_NAME.sub("_", name)[:64] or UNKNOWN_TOOL


def tool_call_id() -> str:
    """A new id for a call that arrived without one (Gemini's OpenAI-compatible
    endpoint, LM Studio, older llama.cpp).  Random, so never the id of an earlier
    call: the same call made in two rounds used to get the same id, and Anthropic
    refuses a request whose ``tool_use`` ids repeat.  (Nothing needs it stable:
    it is made once, on the whole answer, and stored with the call.)"""
    return "call_" + secrets.token_hex(12)


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """Tool arguments from a JSON string (or already a dict); junk becomes {}."""
    if isinstance(raw, dict):
        return raw
    if not raw or not raw.strip():
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"value": value}


# finish / stop reasons of an answer cut short by a token limit
CUT_REASONS = frozenset({"length", "max_tokens", "model_context_window_exceeded"})
# ... and by the provider's content filter (OpenAI's finish_reason, Anthropic's
# stop_reason): the answer may stop mid-sentence, or say nothing at all
FILTER_REASONS = frozenset({"content_filter", "refusal"})


def arguments_complete(raw: str | dict[str, Any] | None) -> bool:
    """Whether streamed (or raw) tool arguments are a whole JSON object."""
    if isinstance(raw, dict):
        return True
    if not raw or not raw.strip():
        return False
    try:
        return isinstance(orjson.loads(raw), dict)
    except orjson.JSONDecodeError:
        return False


def cut_note(names: Sequence[str], *, filtered: bool = False) -> str:
    """What the user reads when an answer was cut in the middle of a tool call
    (``filtered``: by the provider's content filter, not the length limit)."""
    named = ", ".join(f"`{n}`" for n in names if n)
    which = f"a call to {named}" if named else "a tool call"
    if filtered:
        return (
            f"(My answer was stopped by the provider's content filter in the middle of "
            f"{which}, so I did not run it.)"
        )
    return (
        f"(My answer was cut off by the output length limit in the middle of {which}, "
        "so I did not run it. Ask me to continue, or to do it in smaller steps.)"
    )


# the end of an answer of text only that a token limit cut short (the style of
# the turn's _(cut off)_ and _(stopped)_ markers)
LENGTH_NOTE = "_(cut off: the answer reached the length limit)_"
# the end of an answer the provider's content filter stopped
FILTER_NOTE = "_(stopped by the provider's content filter)_"


def drop_cut_calls(
    text: str, calls: Sequence[tuple[ToolCall, bool]], finish: str
) -> tuple[str, list[ToolCall], str]:
    """(text, calls, note) of an answer: when ``finish`` says a token limit or the
    content filter cut it, the calls not marked whole are dropped (never run with
    half their arguments) and ``note`` (also appended to ``text``) says so; an
    answer of text only gets :data:`LENGTH_NOTE` or :data:`FILTER_NOTE` (after
    closing a code block it was cut in).  Otherwise all calls are kept and
    ``note`` is empty."""
    filtered = finish in FILTER_REASONS
    if not (filtered or finish in CUT_REASONS) or (calls and all(w for _, w in calls)):
        return text, [c for c, _ in calls], ""
    if calls:
        note = cut_note([c.name for c, whole in calls if not whole], filtered=filtered)
    else:
        note = FILTER_NOTE if filtered else LENGTH_NOTE
    closing = open_fence(text)
    if closing:
        note = ("" if text.endswith("\n") else "\n") + closing + "\n\n" + note
    elif text.strip():
        newlines = len(text) - len(text.rstrip("\n"))
        note = "\n" * max(0, 2 - newlines) + note
    return text + note, [c for c, whole in calls if whole], note


def _unpack_parallel(call: ToolCall) -> list[ToolCall] | None:
    """The calls inside gpt-4o's ``multi_tool_use.parallel`` wrapper, or None when
    its arguments are not of that shape."""
    uses = call.arguments.get("tool_uses")
    if not isinstance(uses, list) or not uses:
        return None
    out = []
    for use in uses:
        if not isinstance(use, dict) or not isinstance(use.get("recipient_name"), str):
            return None
        params = use.get("parameters")
        params = {} if params is None else params
        if not isinstance(params, dict):
            return None
        out.append(ToolCall("", use["recipient_name"].removeprefix("functions."), params))
    return out


def fix_tool_calls(calls: Sequence[ToolCall], known: Iterable[str] = ()) -> tuple[ToolCall, ...]:
    """The calls parsed from a response as Parley keeps them: a ``proxy_`` prefix
    dropped, gpt-4o's ``multi_tool_use.parallel`` unpacked into the calls it
    wraps, any other name no API would accept back in the history made safe
    (:func:`safe_tool_name`: the call is then answered "no tool named ..."), and a
    missing (or, within the answer, repeated) id replaced by a new one."""
    known_list = list(known)
    expanded: list[ToolCall] = []
    for c in calls:
        inner = _unpack_parallel(c) if c.name == PARALLEL_WRAPPER else None
        expanded.extend(inner if inner is not None else [c])
    out = []
    seen: set[str] = set()
    for c in expanded:
        name = safe_tool_name(normalize_tool_name(c.name, known_list))
        cid = c.id if c.id and c.id not in seen else tool_call_id()
        seen.add(cid)
        out.append(ToolCall(cid, name, c.arguments))
    return tuple(out)


def _fit_id(call_id: str, limit: int) -> str:
    """``call_id`` within ``limit`` characters (0: no limit): a longer one keeps its
    start and gets a short hash of the whole, so two long ids stay apart and the
    same id always maps the same way."""
    if not limit or len(call_id) <= limit:
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:10]
    return f"{call_id[: limit - 11]}_{digest}"


def wire_history(messages: Sequence[ChatMessage], *, id_limit: int = 0) -> tuple[ChatMessage, ...]:
    """``messages`` as a request may carry them, whatever a stored history holds
    (sessions saved before these repairs, or by another backend):

    * tool names no API accepts (``multi_tool_use.parallel``, an empty name) made
      safe (:func:`safe_tool_name`);
    * a call id already used by an earlier call (ids made up for calls that came
      without one used to repeat, within one answer or across answers) renamed to
      ``<id>_2``...: Anthropic refuses repeated ``tool_use`` ids.  The results
      carrying a stored id answer the calls of the latest answer with that id in
      order: the first result the first such call, the next the next;
    * a result for a call that is already answered (every call with its id is)
      dropped as a second result (OpenAI and Anthropic refuse it);
    * ids longer than ``id_limit`` (OpenAI: :data:`OPENAI_ID_LIMIT`) shortened, the
      same for a call and its result.

    Deterministic, so a conversation's requests keep one prefix (prompt caching).
    A history that needs none of it is returned as it is."""
    out: list[ChatMessage] = []
    used: set[str] = set()  # ids sent for calls so far
    # a stored id -> the ids sent for the calls with it in the latest answer that
    # has it, not yet answered, oldest first
    waiting: dict[str, deque[str]] = {}
    answered: set[str] = set()  # ids sent for results so far
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            calls = []
            fresh: dict[str, deque[str]] = {}
            for c in m.tool_calls:
                cid = _fit_id(c.id, id_limit)
                n = 1
                while not cid or cid in used:
                    n += 1
                    cid = _fit_id(f"{c.id or 'call'}_{n}", id_limit)
                used.add(cid)
                fresh.setdefault(c.id, deque()).append(cid)
                calls.append(ToolCall(cid, safe_tool_name(c.name), c.arguments))
            waiting.update(fresh)  # an earlier answer's calls with these ids: done
            fixed = tuple(calls)
            out.append(m if fixed == m.tool_calls else replace(m, tool_calls=fixed))
        elif m.role == "tool":
            queue = waiting.get(m.tool_call_id)
            if queue is not None:
                if not queue:
                    continue  # a second result: every call with this id is answered
                cid = queue.popleft()
            else:  # no call with this id before it: passed on, its id fitted
                cid = _fit_id(m.tool_call_id, id_limit)
                if cid in answered:
                    continue  # another result already went with that id
            answered.add(cid)
            out.append(m if cid == m.tool_call_id else replace(m, tool_call_id=cid))
        else:
            out.append(m)
    return tuple(out)


def merge_user_runs(messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    """Consecutive user messages joined into one (texts apart by a blank line,
    images kept).  A failed call or an /interrupt leaves the person's message
    unanswered in the history, and chat templates that require roles to alternate
    (Gemma, Mistral on vLLM, TGI, llama.cpp) refuse two in a row."""
    out: list[ChatMessage] = []
    for m in messages:
        if out and m.role == "user" and out[-1].role == "user":
            prev = out[-1]
            text = "\n\n".join(t for t in (prev.content, m.content) if t.strip())
            out[-1] = replace(
                prev, content=text, images=prev.images + m.images, mid_turn=prev.mid_turn
            )
        else:
            out.append(m)
    return tuple(out)


def _call_text(call: ToolCall) -> str:
    args = orjson.dumps(call.arguments, option=orjson.OPT_SORT_KEYS).decode()
    return f"[called tool {call.name} with {args}]"


def _result_text(msg: ChatMessage) -> str:
    label = msg.name or msg.tool_call_id or "tool"
    return f"[result of tool {label}]\n{msg.content}"


def flatten_tools(messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    """Tool calls and results as plain text, for backends without tool support."""
    out: list[ChatMessage] = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            parts = [m.content] if m.content else []
            parts += [_call_text(c) for c in m.tool_calls]
            out.append(ChatMessage("assistant", "\n".join(parts)))
        elif m.role == "tool":
            out.append(ChatMessage("user", _result_text(m)))
        else:
            out.append(m)
    return tuple(out)


def sanitize_tool_messages(messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    """Rewrite orphaned tool results (no matching call before them) as user text,
    and drop calls that never got a result (stating them as text instead)."""
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    open_calls: set[str] = set()
    out: list[ChatMessage] = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            kept = tuple(c for c in m.tool_calls if c.id in answered)
            dropped = [c for c in m.tool_calls if c.id not in answered]
            open_calls.update(c.id for c in kept)
            text = "\n".join([m.content, *(_call_text(c) for c in dropped)]).strip()
            if kept or text:
                out.append(ChatMessage("assistant", text, kept))
        elif m.role == "tool" and m.tool_call_id not in open_calls:
            out.append(ChatMessage("user", _result_text(m)))
        else:
            out.append(m)
    return tuple(out)
