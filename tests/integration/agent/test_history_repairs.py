"""Histories a provider would refuse on every later turn, until /new.

Each test plays a conversation against the fake server (which answers 400 to a
history the real API refuses) and checks that the message after the incident is
answered normally:

* gpt-4o calls ``multi_tool_use.parallel`` (its internal wrapper, a name OpenAI
  refuses back in a history: "Invalid 'messages[2].tool_calls[0].function.name':
  string does not match pattern"), or a tool with an empty name;
* a server that sends tool calls without ids (Gemini's OpenAI-compatible endpoint,
  LM Studio, older llama.cpp): the same call in two rounds used to get the same
  made-up id, refused by an Anthropic primary or fallback ("`tool_use` ids must
  be unique");
* a chat template that requires roles to alternate (Gemma, Mistral on vLLM, TGI,
  llama.cpp): one failed call leaves the person's message unanswered, and the
  next request had two user messages in a row;
* a session stored before these repairs (repeated ids, an unsafe name, ids longer
  than OpenAI's 40 characters) recovers on its next message.
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest

from agent_core.agent.session import Session
from agent_core.events import ThreadKey
from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.base import ChatMessage, ToolCall
from agent_core.llm.failover import Failover
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from agent_core.store import keys
from tests.fakes.llm_servers import (
    FakeClock,
    FakeLLMServer,
    Reply,
    anthropic_error,
    default_reply,
    openai_error,
    openai_stream,
)
from tests.integration.agent.conftest import user_event
from tests.unit.llm.conftest import config_for


def inventing(name: str, args: str) -> Any:
    """An OpenAI model that answers "go" with one call to ``name``."""

    def reply(path: str, body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last.get("role") == "user" and last.get("content") == "go":
            return openai_stream([], tool_calls=[("call_abc", name, args)])
        if last.get("role") == "tool":
            return openai_stream(["tools done"])
        return default_reply(path, body)

    return reply


WRAPPED = json.dumps({"tool_uses": [{"recipient_name": "functions.current_time"}]})


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("multi_tool_use.parallel", WRAPPED),
        ("multi_tool_use.parallel", "{}"),  # not of the wrapper's shape
        ("", "{}"),
        ("functions.current_time", "{}"),
    ],
)
async def test_an_invented_tool_name_does_not_break_the_conversation(
    world: Any, name: str, args: str
) -> None:
    T = ThreadKey("web", "local", "bad-tool-name")
    async with FakeLLMServer() as server:
        server.responder = inventing(name, args)
        model = OpenAIProvider(config_for(server, "openai", llm_max_retries=0), PriceTable())
        await model.initialize()
        try:
            w = world(model)
            await w.start()
            for text in ("go", "hello there"):
                await w.send(user_event(T, text))
                await w.settle(T)
            texts = w.texts(T)
            session = await w.session(T)
            await w.stop()
        finally:
            await model.shutdown()
    assert texts == ["tools done", "echo: hello there"], texts
    names = [c.name for m in session.history for c in m.tool_calls]
    assert names and all(n and "." not in n for n in names), names
    if args == WRAPPED:
        assert names == ["current_time"]  # the wrapped call itself was made


def without_ids(state: dict[str, bool]) -> Any:
    def reply(path: str, body: dict[str, Any]) -> Reply:
        if path.endswith("/messages"):
            if state["anthropic_down"]:
                return anthropic_error(529, "overloaded_error", "Overloaded")
            return default_reply(path, body)
        last = body["messages"][-1]
        if last.get("role") == "tool":
            return openai_stream(["it is ", "noon"], model="fake-model")
        if "time" in str(last.get("content")):
            # a server that gives its tool calls no id
            return openai_stream([], tool_calls=[("", "current_time", "{}")], model="fake-model")
        return default_reply(path, body)

    return reply


async def test_calls_without_ids_do_not_break_the_conversation_on_anthropic(world: Any) -> None:
    T = ThreadKey("web", "local", "dup-tool-ids")
    state = {"anthropic_down": True}
    clock = FakeClock()
    async with FakeLLMServer() as server:
        server.responder = without_ids(state)
        primary = AnthropicProvider(
            config_for(server, "anthropic", llm_max_retries=0), PriceTable()
        )
        fallback = OpenAIProvider(config_for(server, "compat", llm_max_retries=0), PriceTable())
        chain = Failover([primary, fallback], threshold=1, cooldown_secs=60, clock=clock)
        await chain.initialize()
        try:
            w = world(chain)
            await w.start()
            for text in ("what time is it?", "and what time is it now?"):
                await w.send(user_event(T, text))
                await w.settle(T)
            state["anthropic_down"] = False
            clock.advance(120)  # the primary is back
            await w.send(user_event(T, "thanks"))
            await w.settle(T)
            texts = w.texts(T)
            session = await w.session(T)
            await w.stop()
        finally:
            await chain.shutdown()
    ids = [c.id for m in session.history for c in m.tool_calls]
    assert texts == ["it is noon", "it is noon", "echo: thanks"], (ids, texts)
    assert len(ids) == 2 and len(set(ids)) == 2, ids


ALTERNATE = "Conversation roles must alternate user/assistant/user/assistant/..."


def template(state: dict[str, int]) -> Any:
    def reply(path: str, body: dict[str, Any]) -> Reply:
        if not path.endswith("/chat/completions"):
            return default_reply(path, body)
        roles = [m["role"] for m in body["messages"] if m["role"] != "system"]
        if any(a == b for a, b in pairwise(roles)):
            return openai_error(400, "", ALTERNATE, kind="BadRequestError")
        if state["fail"]:
            state["fail"] -= 1
            return openai_error(503, "", "upstream overloaded", kind="server_error")
        return default_reply(path, body)

    return reply


async def test_one_failed_call_does_not_break_an_alternating_template(world: Any) -> None:
    T = ThreadKey("web", "local", "alternate")
    state = {"fail": 0}
    async with FakeLLMServer() as server:
        server.responder = template(state)
        model = OpenAIProvider(config_for(server, "compat", llm_max_retries=0), PriceTable())
        await model.initialize()
        try:
            w = world(model)
            await w.start()
            await w.send(user_event(T, "first"))
            await w.settle(T)
            state["fail"] = 1  # one transient failure of the server
            for text in ("second", "third", "fourth"):
                await w.send(user_event(T, text))
                await w.settle(T)
            texts = w.texts(T)
            sent = server.requests[-1].body["messages"]
            await w.stop()
        finally:
            await model.shutdown()
    assert texts[0] == "echo: first"
    assert texts[-2:] == ["echo: second\n\nthird", "echo: fourth"], texts
    # the unanswered "second" travels with "third", joined into one user message
    assert any(m["content"] == "second\n\nthird" for m in sent), sent


def stored_history() -> list[ChatMessage]:
    """What a session saved before the repairs can hold."""
    long_id = "fc_" + "0f0e50a1476a6c35006912c58dc9f8819192c25864eb16f07f"
    out: list[ChatMessage] = []
    for n, (cid, name) in enumerate(
        [("call_same", "current_time"), ("call_same", "current_time"), (long_id, "x.y")]
    ):
        out += [
            ChatMessage("user", f"question {n}"),
            ChatMessage("assistant", "", (ToolCall(cid, name, {}),)),
            ChatMessage("tool", f"result {n}", tool_call_id=cid, name=name),
            ChatMessage("assistant", f"answer {n}"),
        ]
    return out


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
async def test_a_stored_session_with_a_broken_history_recovers(world: Any, backend: str) -> None:
    T = ThreadKey("web", "local", f"stored-{backend}")
    async with FakeLLMServer() as server:
        cls = OpenAIProvider if backend == "openai" else AnthropicProvider
        model = cls(config_for(server, backend, llm_max_retries=0), PriceTable())
        await model.initialize()
        try:
            w = world(model)
            s = Session(str(T), history=stored_history())
            await w.redis.hset(keys.session(T), mapping={"v": 1, "d": s.to_json()})
            await w.start()
            await w.send(user_event(T, "and now?"))
            await w.settle(T)
            texts = w.texts(T)
            await w.stop()
        finally:
            await model.shutdown()
    assert texts == ["echo: and now?"], texts
