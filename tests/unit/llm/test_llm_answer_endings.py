"""How answers end on the wire, and what the user reads at the end:

* a stream whose final event (``[DONE]``, ``message_stop``) arrived keeps its
  answer when the connection then drops without a proper end or stays open, and
  so does an Anthropic stream whose ``message_delta`` (the stop_reason) arrived;
* OpenAI refusals are the answer's text, streamed or not;
* an answer of text only cut by the output limit ends with a note, after
  closing a code block it was cut in; one stopped by the provider's content
  filter (``content_filter``, ``refusal``) ends with a note too;
* an Anthropic tool call with no arguments that got its ``content_block_stop``
  is whole, even when the answer hit ``max_tokens``;
* Anthropic stream events that are ``[DONE]`` or JSON but not an object are
  skipped.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_core.llm.anthropic import AnthropicProvider
from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    StreamItem,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from agent_core.llm.schema import FILTER_NOTE, LENGTH_NOTE, drop_cut_calls
from tests.fakes.llm_servers import (
    FakeLLMServer,
    Reply,
    anthropic_stream,
    anthropic_text,
    openai_stream,
)
from tests.unit.llm.conftest import config_for

HELLO = CompletionRequest((ChatMessage("user", "hello"),))
LIST = ToolSpec("list_files", "list the files", {"type": "object", "properties": {}})


async def _provider(server: FakeLLMServer, backend: str, **kw: Any) -> Any:
    cls = AnthropicProvider if backend == "anthropic" else OpenAIProvider
    p = cls(config_for(server, backend, **kw), PriceTable())
    await p.initialize()
    return p


async def _items(p: Any, request: CompletionRequest = HELLO) -> list[StreamItem]:
    return [i async for i in p.stream(request)]


def _final(items: list[StreamItem]) -> Completion:
    final = items[-1]
    assert isinstance(final, Completion)
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == final.text
    return final


async def _streamed(server: FakeLLMServer, backend: str) -> Completion:
    """The final of one streamed answer from ``backend`` (checked against its deltas)."""
    p = await _provider(server, backend)
    try:
        return _final(await _items(p))
    finally:
        await p.shutdown()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str, dict[str, Any]]:
    choice: dict[str, Any] = {"index": 0, "delta": delta}
    if finish:
        choice["finish_reason"] = finish
    return ("", {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]})


def _finished_stream(backend: str) -> Reply:
    if backend == "anthropic":
        return anthropic_stream(["Hello ", "world"])
    return openai_stream(["Hello ", "world"])


# --- 1. a finished answer survives what the connection does afterwards ---------------
@pytest.mark.parametrize("backend", ["openai", "anthropic"])
async def test_a_connection_dropped_after_the_final_event_keeps_the_answer(
    server: FakeLLMServer, backend: str
) -> None:
    """The server sends every event, [DONE] / message_stop included, then drops the
    connection without ending the body ("Response payload is not completed")."""
    reply = _finished_stream(backend)
    reply.cut = True
    server.push(reply)
    final = await _streamed(server, backend)
    assert final.text == "Hello world"


@pytest.mark.parametrize("ending", ["cut", "end"])
async def test_an_anthropic_answer_whole_at_its_message_delta_is_kept(
    server: FakeLLMServer, ending: str
) -> None:
    """The connection drops (or the body ends) after the message_delta carrying the
    stop_reason and the final usage, before message_stop: the answer is whole, as an
    OpenAI answer is at its finish_reason.  It was an InvalidResponse: the shown
    answer got _(cut off)_ and an error notice."""
    reply = anthropic_stream(["All ", "done."], output_tokens=3)
    assert reply.events is not None and reply.events[-1][0] == "message_stop"
    reply.events.pop()
    reply.cut = ending == "cut"
    server.push(reply)
    final = await _streamed(server, "anthropic")
    assert final.text == "All done."
    assert final.finish_reason == "end_turn"
    assert final.usage.output == 3


async def test_an_openai_answer_whole_at_its_finish_reason_is_kept(server: FakeLLMServer) -> None:
    """The connection drops after the chunk with the finish_reason, before the usage
    chunk and [DONE]: the answer is whole (it was an InvalidResponse)."""
    events = [_chunk({"role": "assistant", "content": "All done."}), _chunk({}, "stop")]
    server.push(Reply(events=events, cut=True))
    final = await _streamed(server, "openai")
    assert final.text == "All done." and final.finish_reason == "stop"


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
async def test_a_body_kept_open_after_the_final_event_does_not_wait_for_the_timeout(
    server: FakeLLMServer, backend: str
) -> None:
    """The body stays open after the final event: the answer arrives at once (not
    after the read timeout as a Timeout), and its connection is not held (one
    connection in the pool: a held one would make the next call wait)."""
    reply = _finished_stream(backend)
    reply.linger = 20.0
    server.push(reply)
    p = await _provider(server, backend, llm_timeout_secs=10.0, llm_pool_size=1)
    try:
        final = _final(await asyncio.wait_for(_items(p), 3.0))
        assert final.text == "Hello world"
        out = await asyncio.wait_for(p.complete(HELLO), 3.0)
        assert out.text == "echo: hello"
    finally:
        await p.shutdown()


# --- 7. OpenAI refusals ----------------------------------------------------------------
async def test_an_openai_refusal_is_the_answer(server: FakeLLMServer) -> None:
    refusal = "I'm sorry, I can't help with that."
    server.push(
        Reply(
            json={
                "model": "gpt-4o",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None, "refusal": refusal},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 9},
            }
        )
    )
    p = await _provider(server, "openai")
    try:
        out = await p.complete(HELLO)
    finally:
        await p.shutdown()
    assert out.text == refusal


async def test_an_openai_streamed_refusal_arrives_as_text(server: FakeLLMServer) -> None:
    server.push(
        Reply(
            events=[
                _chunk({"role": "assistant", "content": None, "refusal": ""}),
                _chunk({"refusal": "I'm sorry, "}),
                _chunk({"refusal": "I can't help with that."}),
                _chunk({}, "stop"),
                ("", "[DONE]"),
            ]
        )
    )
    p = await _provider(server, "openai")
    try:
        items = await _items(p)
    finally:
        await p.shutdown()
    assert [i.text for i in items if isinstance(i, TextDelta)] == [
        "I'm sorry, ",
        "I can't help with that.",
    ]
    assert _final(items).text == "I'm sorry, I can't help with that."


# --- 8. an answer of text only cut by the output limit says so -----------------------
async def test_an_openai_text_answer_cut_by_the_limit_ends_with_a_note(
    server: FakeLLMServer,
) -> None:
    server.push(
        Reply(
            events=[
                _chunk({"role": "assistant", "content": "The three reasons are"}),
                _chunk({"content": " first, that"}),
                _chunk({}, "length"),
                ("", "[DONE]"),
            ]
        )
    )
    final = await _streamed(server, "openai")
    assert final.finish_reason == "length"
    assert final.text == f"The three reasons are first, that\n\n{LENGTH_NOTE}"


async def test_an_anthropic_answer_cut_inside_a_code_block_closes_it_before_the_note(
    server: FakeLLMServer,
) -> None:
    reply = anthropic_text("Here it is:\n\n```python\nprint(")
    reply.json["stop_reason"] = "max_tokens"
    server.push(reply)
    p = await _provider(server, "anthropic")
    try:
        out = await p.complete(HELLO)
    finally:
        await p.shutdown()
    assert out.text == f"Here it is:\n\n```python\nprint(\n```\n\n{LENGTH_NOTE}"


def test_the_length_note_only_for_an_answer_cut_by_a_token_limit() -> None:
    assert drop_cut_calls("All done.", [], "stop") == ("All done.", [], "")
    assert drop_cut_calls("Cut\n", [], "max_tokens")[2] == f"\n{LENGTH_NOTE}"
    assert drop_cut_calls("", [], "length")[0] == LENGTH_NOTE
    whole = ToolCall("c1", "list_files", {})
    assert drop_cut_calls("", [(whole, True)], "length") == ("", [whole], "")


# --- 8b. an answer stopped by the provider's content filter says so -------------------
async def test_an_openai_answer_stopped_by_the_content_filter_ends_with_a_note(
    server: FakeLLMServer,
) -> None:
    """finish_reason content_filter: the half sentence was shown as the whole answer."""
    server.push(
        Reply(
            events=[
                _chunk({"role": "assistant", "content": "First, open the"}),
                _chunk({}, "content_filter"),
                ("", "[DONE]"),
            ]
        )
    )
    final = await _streamed(server, "openai")
    assert final.finish_reason == "content_filter"
    assert final.text == f"First, open the\n\n{FILTER_NOTE}"


@pytest.mark.parametrize("stream", [True, False])
async def test_an_anthropic_refusal_stop_ends_with_a_note(
    server: FakeLLMServer, stream: bool
) -> None:
    """stop_reason refusal (Anthropic's streaming classifiers stopped the answer)."""
    if stream:
        reply = anthropic_stream(["Step one is to"])
        assert reply.events is not None
        for name, data in reply.events:
            if name == "message_delta":
                data["delta"]["stop_reason"] = "refusal"
    else:
        reply = anthropic_text("Step one is to")
        reply.json["stop_reason"] = "refusal"
    server.push(reply)
    p = await _provider(server, "anthropic")
    try:
        out = _final(await _items(p)) if stream else await p.complete(HELLO)
    finally:
        await p.shutdown()
    assert out.text == f"Step one is to\n\n{FILTER_NOTE}"


def test_the_filter_note_for_a_filtered_answer_and_its_cut_calls() -> None:
    assert drop_cut_calls("", [], "content_filter")[0] == FILTER_NOTE
    half = ToolCall("c1", "list_files", {"_raw": '{"dir": "/'})
    _, kept, note = drop_cut_calls("", [(half, False)], "content_filter")
    assert kept == [] and "content filter" in note and "`list_files`" in note


# --- 9. an Anthropic tool call without arguments is whole -----------------------------
async def test_an_anthropic_call_without_arguments_is_kept_when_the_answer_hit_max_tokens(
    server: FakeLLMServer,
) -> None:
    reply = anthropic_stream(["Listing."], tool_uses=[("toolu_1", "list_files", "")])
    assert reply.events is not None
    reply.events = [
        (name, data)
        for name, data in reply.events
        if not (name == "content_block_delta" and data["delta"]["type"] == "input_json_delta")
    ]
    for name, data in reply.events:
        if name == "message_delta":
            data["delta"]["stop_reason"] = "max_tokens"
    server.push(reply)
    p = await _provider(server, "anthropic")
    try:
        final = _final(
            await _items(p, CompletionRequest((ChatMessage("user", "ls"),), tools=(LIST,)))
        )
    finally:
        await p.shutdown()
    assert final.tool_calls == (ToolCall("toolu_1", "list_files", {}),)
    assert final.text == "Listing."


# --- 10. Anthropic events that are no event object -------------------------------------
async def test_anthropic_stream_skips_non_object_events_and_done(server: FakeLLMServer) -> None:
    reply = anthropic_stream(["Hello ", "world"])
    assert reply.events is not None
    reply.events.insert(1, ("", 1))
    reply.events.insert(3, ("", "[1, 2]"))
    reply.events.append(("", "[DONE]"))
    server.push(reply)
    final = await _streamed(server, "anthropic")
    assert final.text == "Hello world"


async def test_anthropic_done_after_message_stop_is_no_error(server: FakeLLMServer) -> None:
    """A proxy ending an Anthropic stream OpenAI-style, in the same read as
    message_stop."""
    reply = anthropic_stream(["Hi"])
    assert reply.events is not None
    reply.events.append(("", "[DONE]"))
    server.push(reply)
    final = await _streamed(server, "anthropic")
    assert final.text == "Hi"
