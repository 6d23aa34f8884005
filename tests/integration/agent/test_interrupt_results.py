"""/interrupt while a round of tools runs: the model is told what really happened to
each call (docs/agent.md, "How /interrupt works").  A call that finished keeps its
result (its side effect is done: before, it was reported "not run" and the model
would believe the note unsaved and save it again); one still running is
"interrupted (it may have partly run)"; one never started (waiting for its
approval) is "not run"."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent_core.agent.interrupt import interrupt_filter
from agent_core.agent.reply import ReplyWriter
from agent_core.agent.session import Session, ThreadState
from agent_core.agent.turn_approvals import DENIED, end_wait
from agent_core.errors import SendRateLimited
from agent_core.events import EventKind, MessageRef, OutboundMessage, ThreadKey
from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    StreamItem,
    TextDelta,
    ToolCall,
)
from agent_core.llm.errors import BadRequest
from agent_core.store import keys
from tests.fakes.outbox import RecordingOutbox
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("telegram", "bot1", "intr-results")
STOPPED_RUNNING = "error: interrupted by the user (it may have partly run)"
STOPPED_NOT_RUN = "error: not run (the turn was stopped)"


async def test_each_call_of_a_stopped_round_gets_what_happened_to_it(world: Any) -> None:
    w = world(
        FnModel(
            tools_then_answer(
                (
                    "go",
                    [
                        call("remember", note="likes tea"),
                        call("sleepy", ms=30_000, label="z"),
                        call("counter", label="never"),  # needs an approval
                    ],
                )
            )
        )
    )
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(T, "go"))
    notes = keys.user_notes(user_event(T, "go").qualified_user)
    async with asyncio.timeout(10):  # until the note is saved: the first call is done
        while not await w.redis.hlen(notes):
            await asyncio.sleep(0.01)
    await w.send(user_event(T, "/interrupt"))
    await w.settle(T, timeout=15)
    assert "⏹ Stopped." in w.texts(T)
    session = await w.session(T)
    i = max(n for n, m in enumerate(session.history) if m.role == "assistant" and m.tool_calls)
    results = [(m.name, m.content) for m in session.history[i + 1 :] if m.role == "tool"]
    assert [name for name, _ in results] == ["remember", "sleepy", "counter"]
    remembered = results[0][1]
    assert not remembered.startswith("error:"), remembered  # the call's own result
    assert results[1:] == [("sleepy", STOPPED_RUNNING), ("counter", STOPPED_NOT_RUN)]
    assert await w.redis.hlen(notes) == 1  # it did run, once
    assert await w.redis.get("test:counter:never") is None


# -- /interrupt ends a send of the approval flow waiting for the platform's rate limit
# (a SendRateLimited is waited out inside the turn: agent_core/agent/reply.py)


def history_problem(messages: Sequence[ChatMessage]) -> str:
    """The providers' rule: an assistant message's calls are each answered once, by
    the tool messages right after it (OpenAI: "role 'tool' must be a response to a
    preceding message with 'tool_calls'"; Anthropic: "each tool_use must have a single
    result")."""
    open_ids: list[str] = []
    for m in messages:
        if m.role == "tool":
            if m.tool_call_id not in open_ids:
                return f"tool message {m.tool_call_id} answers no open call"
            open_ids.remove(m.tool_call_id)
            continue
        if open_ids:
            return f"call {open_ids[0]} has no result"
        if m.role == "assistant" and m.tool_calls:
            open_ids = [c.id for c in m.tool_calls]
    return ""


def strict(table: dict[str, tuple[ToolCall, ...]]) -> Callable[[CompletionRequest], Completion]:
    """A model that refuses an invalid history, as the providers do; ``table``: the
    calls a user's text asks for."""

    def rule(req: CompletionRequest) -> Completion:
        problem = history_problem(req.messages)
        if problem:
            raise BadRequest("HTTP 400: " + problem)
        m = req.messages[-1]
        if m.role == "user" and m.content in table:
            return Completion("", tool_calls=table[m.content])
        return Completion(("done: " if m.role == "tool" else "echo: ") + m.content)

    return rule


@dataclass
class Limited(RecordingOutbox):
    """Sends the platform rate-limits for 600 s: edits (``edits``), approval prompts
    (``prompts``), other messages but notices (``replies``)."""

    edits: bool = False
    prompts: bool = False
    replies: bool = False
    waiting: asyncio.Event = field(default_factory=asyncio.Event)

    def limited(self) -> None:
        self.waiting.set()
        raise SendRateLimited(600, "the platform asks to wait")

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        if (self.prompts and message.buttons) or (
            self.replies and not message.buttons and not message.notice
        ):
            self.limited()
        return await super().send(thread, message, reply_to=reply_to)

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        if self.edits:
            self.limited()
        return await super().edit(ref, message)


async def limited_world(
    world: Any, monkeypatch: Any, table: dict[str, tuple[ToolCall, ...]]
) -> tuple[Any, Limited]:
    monkeypatch.setattr(ReplyWriter, "rate_limit_min_wait", 0.01)
    w = world(FnModel(strict(table)))
    outbox = Limited()
    w.outbox = outbox
    for name in list(w.outboxes):
        w.outboxes[name] = outbox
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    return w, outbox


async def awaiting_counter_approval(
    world: Any, monkeypatch: Any, thread: ThreadKey
) -> tuple[Any, Limited]:
    """A rate-limited world where ``thread`` said "go" and ``counter`` (call_c) now
    waits for its approval."""
    w, outbox = await limited_world(
        world, monkeypatch, {"go": (ToolCall("call_c", "counter", {}),)}
    )
    await w.send(user_event(thread, "go"))
    await w.settle(thread)
    return w, outbox


async def interrupt_the_wait(w: Any, outbox: Limited, thread: ThreadKey) -> None:
    await asyncio.wait_for(outbox.waiting.wait(), 10)
    outbox.edits = outbox.prompts = outbox.replies = False  # (the wait goes on: 600 s)
    await w.send(user_event(thread, "/interrupt"))
    await w.settle(thread, timeout=15)


async def results_of(w: Any, thread: ThreadKey) -> list[tuple[str, str]]:
    session = await w.session(thread)
    assert session.state == ThreadState.IDLE and not session.resume
    assert not session.pending_approval
    assert history_problem(session.history) == "", session.history
    return [(m.tool_call_id, m.content) for m in session.history if m.role == "tool"]


async def still_answers(w: Any, thread: ThreadKey) -> None:
    for text in ("hello", "hello again"):  # a history the provider refuses fails both
        await w.send(user_event(thread, text))
        await w.settle(thread)
    assert w.texts(thread)[-1] == "echo: hello again", w.texts(thread)


async def test_a_call_that_ran_keeps_its_result_when_the_prompt_send_is_interrupted(
    world: Any, monkeypatch: Any
) -> None:
    """One response: ``sleepy`` runs at once, ``counter`` needs an approval whose
    prompt waits for the rate limit.  Before, the call that ran was reported "not
    run" (the model might do its side effect again)."""
    t = ThreadKey("web", "local", "intr-prompt-send")
    calls = (ToolCall("call_s", "sleepy", {"label": "ran"}), ToolCall("call_c", "counter", {}))
    w, outbox = await limited_world(world, monkeypatch, {"go": calls})
    outbox.prompts = True
    await w.send(user_event(t, "go"))
    await interrupt_the_wait(w, outbox, t)
    assert await results_of(w, t) == [("call_s", "ran"), ("call_c", STOPPED_NOT_RUN)]
    assert not w.prompts(t)  # never shown: nothing waits for it
    await still_answers(w, t)


@pytest.mark.parametrize("decision", ["a", "d"])
async def test_an_interrupted_prompt_close_ends_the_wait_once(
    world: Any, monkeypatch: Any, decision: str
) -> None:
    """A press decides; the edit closing the prompt waits for the rate limit and
    /interrupt ends it.  Before, the round's calls got "not run" while the session
    still waited, and the next message ended the wait with a second result for each:
    every later model call was refused."""
    t = ThreadKey("web", "local", f"intr-close-{decision}")
    w, outbox = await awaiting_counter_approval(world, monkeypatch, t)
    aid = w.prompts(t)[-1].message.buttons[0].payload.split(":")[1]
    outbox.edits = True
    await w.send(user_event(t, "", kind=EventKind.ACTION, token=f"ap:{aid}:{decision}"))
    await interrupt_the_wait(w, outbox, t)
    expected = STOPPED_NOT_RUN if decision == "a" else DENIED
    assert await results_of(w, t) == [("call_c", expected)]
    assert len([x for x in w.texts(t) if "Stopped" in x]) == 1, w.texts(t)  # told once
    assert await w.counter() == 0  # stopped before it ran
    await still_answers(w, t)


async def test_an_interrupted_prompt_of_the_next_queued_call_ends_the_wait_once(
    world: Any, monkeypatch: Any
) -> None:
    """Two calls need approval: the first is approved and runs, the prompt for the
    second waits for the rate limit and /interrupt ends it."""
    t = ThreadKey("web", "local", "intr-next-prompt")
    calls = (
        ToolCall("call_a", "counter", {"label": "a"}),
        ToolCall("call_b", "counter", {"label": "b"}),
    )
    w, outbox = await limited_world(world, monkeypatch, {"go": calls})
    await w.send(user_event(t, "go"))
    await w.settle(t)
    aid = w.prompts(t)[-1].message.buttons[0].payload.split(":")[1]
    outbox.prompts = True
    await w.send(user_event(t, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await interrupt_the_wait(w, outbox, t)
    assert await results_of(w, t) == [("call_a", "counted a -> 1"), ("call_b", STOPPED_NOT_RUN)]
    assert (await w.counter("a"), await w.counter("b")) == (1, 0)
    await still_answers(w, t)


async def test_an_interrupted_command_reply_leaves_the_wait_to_its_prompt(
    world: Any, monkeypatch: Any
) -> None:
    """While an approval waits, a command's reply waits for the rate limit and
    /interrupt ends it: the wait is not touched (its prompt still decides it), and the
    queued /interrupt then cancels the approval, once, and says so: one notice (before,
    the stopped command's turn said "Stopped." as well)."""
    t = ThreadKey("web", "local", "intr-command")
    w, outbox = await awaiting_counter_approval(world, monkeypatch, t)
    outbox.replies = True
    await w.send(user_event(t, "/status"))
    await interrupt_the_wait(w, outbox, t)
    assert await results_of(w, t) == [("call_c", "error: not run: the user cancelled the request")]
    stops = [x for x in w.texts(t) if "Stopped" in x]
    assert stops == ["Stopped: the pending approval was cancelled."], w.texts(t)
    await still_answers(w, t)


def test_ending_a_wait_adds_no_second_result() -> None:
    """Defence in depth: a wait ended on a history whose round already has results
    (repaired by a stop) adds only the missing ones, after them."""
    calls = (ToolCall("c1", "sleepy", {}), ToolCall("c2", "counter", {}))
    s = Session(
        "t",
        history=[
            ChatMessage("user", "go"),
            ChatMessage("assistant", "", tool_calls=calls),
            ChatMessage("tool", STOPPED_NOT_RUN, tool_call_id="c1", name="sleepy"),
        ],
        state=ThreadState.AWAITING_APPROVAL,
        pending_approval="a1",
        resume={"calls": [c.to_dict() for c in calls], "results": {"c1": "ran"}, "queue": ["c2"]},
    )
    end_wait(s, "not run")
    assert [(m.tool_call_id, m.content) for m in s.history[2:]] == [
        ("c1", STOPPED_NOT_RUN),
        ("c2", "not run"),
    ]
    assert s.state == ThreadState.IDLE and not s.resume and not s.pending_approval


async def test_an_interrupted_cancel_ends_the_wait_once(world: Any, monkeypatch: Any) -> None:
    """/new cancels the pending approval; the edit closing its prompt waits for the
    rate limit and /interrupt ends it (the /new is stopped there): the wait ends once,
    the call cancelled."""
    t = ThreadKey("web", "local", "intr-cancel")
    w, outbox = await awaiting_counter_approval(world, monkeypatch, t)
    outbox.edits = True
    await w.send(user_event(t, "/new"))
    await interrupt_the_wait(w, outbox, t)
    assert await results_of(w, t) == [("call_c", "error: not run: the user cancelled the request")]
    await still_answers(w, t)


async def test_an_interrupted_close_of_an_expired_prompt_ends_the_wait_once(
    world: Any, monkeypatch: Any
) -> None:
    """A message after the approval expired ends the wait; the edit marking its prompt
    expired waits for the rate limit and /interrupt ends it."""
    t = ThreadKey("web", "local", "intr-expired")
    w, outbox = await awaiting_counter_approval(world, monkeypatch, t)
    w.clock.offset = w.settings.approval_ttl_secs + 60
    outbox.edits = True
    await w.send(user_event(t, "anyone there?"))
    await interrupt_the_wait(w, outbox, t)
    assert await results_of(w, t) == [("call_c", "error: not run: the approval request expired")]
    await still_answers(w, t)


class PreambleModel(FnModel):
    """Streams its text word by word before its tool calls."""

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        c = await self.complete(request)
        for word in c.text.split(" "):
            if word:
                yield TextDelta(word + " ")
        yield c


async def test_interrupt_during_a_tool_leaves_the_finished_preamble_alone(world: Any) -> None:
    """The sentence streamed before a tool call ("Let me check the logs.") is finished
    as a message of its own, whole: /interrupt while the tool runs does not mark it
    "_(stopped)_" (before: ``_stop_streaming`` finished that reply again, marked)."""
    thread = ThreadKey("web", "local", "interrupt-preamble")
    preamble = "Let me check the logs."

    def rule(req: CompletionRequest) -> Completion:
        if req.messages[-1].role == "tool":
            return Completion("All good.")
        return Completion(preamble, tool_calls=(call("sleepy", ms=5000, label="z"),))

    w = world(PreambleModel(rule))
    w.outbox.stream_interval = 1.0
    w.ingest.add_filter(interrupt_filter(w.redis))
    await w.start()
    await w.send(user_event(thread, "why did it crash?"))
    for _ in range(100):  # until the preamble is shown (the tool is running)
        if w.texts(thread):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    await w.send(user_event(thread, "/interrupt"))
    await w.settle(thread)
    shown = w.texts(thread)
    assert any("Stopped" in t for t in shown), shown
    assert shown[0] == preamble, shown
