"""A model call that ends badly: what the user sees and what the budgets count.

A context-length error after text streamed is a cut-off, not a second answer; a call
whose provider reported no usage, or that failed after streaming, is billed an
estimate (the prompt, and 4 characters a token of the answer); a refused request
(400) says so and suggests /new.  A stream that stalls right after some text still
shows that text (a catch-up edit once the stream interval is over)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from agent_core.agent.budget import BudgetGuard
from agent_core.agent.fences import with_marker
from agent_core.agent.reply import StreamingReply
from agent_core.agent.tokens import tools_tokens
from agent_core.errors import LockLost, SendFailed
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.llm import errors as llm_errors
from agent_core.llm.base import (
    Completion,
    CompletionRequest,
    ModelInfo,
    StreamItem,
    TextDelta,
    TokenUsage,
)
from tests.fakes.outbox import RecordingOutbox
from tests.integration.agent.conftest import FnModel, user_event

PRICED = ModelInfo("p", input_cost_per_token=0.001, output_cost_per_token=0.001)


class Streams(FnModel):
    """Each stream call plays the next script (TextDelta / Completion / exception);
    ``complete`` (summaries) answers 'summary'."""

    def __init__(self, *scripts: list[Any], info: ModelInfo = PRICED) -> None:
        super().__init__(lambda req: Completion("summary"), info)
        self.scripts: deque[list[Any]] = deque(scripts)
        self.streams: list[CompletionRequest] = []

    async def stream(self, request: CompletionRequest) -> Any:
        self.streams.append(request)
        for item in self.scripts.popleft():
            if isinstance(item, BaseException):
                raise item
            yield item


async def _turn(model: Any, world: Any, name: str, **settings: Any) -> tuple[Any, ThreadKey]:
    t = ThreadKey("telegram", "bot", name)
    w = world(model, **settings)
    w.outbox.stream_interval = 0.0  # a channel that shows the answer as it streams
    await w.start()
    await w.send(user_event(t, "tell me about the sea " + "please " * 20))
    await w.settle(t)
    return w, t


async def test_context_length_after_text_is_a_cut_off_not_a_second_answer(world: Any) -> None:
    partial = "The sea covers most of the planet, and "
    model = Streams(
        [TextDelta(partial), llm_errors.ContextLengthExceeded("prompt is too long")],
        [TextDelta("A whole new answer."), Completion("A whole new answer.")],
    )
    w, t = await _turn(model, world, "dm-ctx-cut")
    texts = w.texts(t)
    assert len(model.streams) == 1, texts  # not asked again
    assert not any("A whole new answer" in x for x in texts), texts
    assert texts[0] == with_marker(partial, "_(cut off)_"), texts
    assert "too long for the model" in texts[-1]


def _specs_usd(w: Any) -> float:
    """The tools' specs, part of every prompt, at $0.001 a token."""
    return tools_tokens(w.workers[0][0].agent.tools.specs()) * 0.001


async def test_a_completed_call_without_usage_is_billed_an_estimate(world: Any) -> None:
    answer = "The sea is large. " * 20
    model = Streams([TextDelta(answer), Completion(answer)])  # no usage reported
    w, t = await _turn(model, world, "dm-no-usage", user_daily_budget_usd=5.0)
    assert w.texts(t)[-1] == answer.strip()
    spend = await BudgetGuard(w.redis, w.settings).spend("telegram:u1")
    # a prompt of some tens of tokens and the tools' specs, ~90 answer tokens, at
    # $0.001 a token
    specs = _specs_usd(w)
    assert 0.1 + specs < spend.user_usd < 1.0 + specs, spend
    assert (await w.session(t)).cost_usd == pytest.approx(spend.user_usd)


async def test_real_usage_and_cache_hits_are_billed_as_reported(world: Any) -> None:
    model = Streams(
        [TextDelta("a"), Completion("a", usage=TokenUsage(100, 10))],
        [TextDelta("b"), Completion("b", provider="cache(fn:model)")],  # a hit costs 0
    )
    w, t = await _turn(model, world, "dm-usage", user_daily_budget_usd=5.0)
    await w.send(user_event(t, "again"))
    await w.settle(t)
    spend = await BudgetGuard(w.redis, w.settings).spend("telegram:u1")
    assert abs(spend.user_usd - 0.11) < 1e-6, spend


async def test_a_call_that_fails_after_text_is_billed_an_estimate(world: Any) -> None:
    partial = "The sea covers most of the planet. " * 10
    model = Streams([TextDelta(partial), llm_errors.RequestFailed("connection reset")])
    w, t = await _turn(model, world, "dm-cut-billed", user_daily_budget_usd=5.0)
    assert w.texts(t)[0].endswith("_(cut off)_")
    spend = await BudgetGuard(w.redis, w.settings).spend("telegram:u1")
    specs = _specs_usd(w)
    assert 0.1 + specs < spend.user_usd < 1.0 + specs, spend
    assert (await w.session(t)).cost_usd == pytest.approx(spend.user_usd)


async def test_a_call_refused_before_any_text_is_not_billed(world: Any) -> None:
    model = Streams([llm_errors.RequestFailed("503")])
    w, _t = await _turn(model, world, "dm-refused-free", user_daily_budget_usd=5.0)
    spend = await BudgetGuard(w.redis, w.settings).spend("telegram:u1")
    assert spend.user_usd == 0


async def test_a_refused_request_suggests_new_and_shows_no_provider_body(world: Any) -> None:
    body = "invalid_request_error: messages.3: tool_use ids were found ... key sk-abcdefgh12345678"
    model = Streams([llm_errors.BadRequest(body)])
    w, t = await _turn(model, world, "dm-bad-request")
    said = w.texts(t)[-1]
    assert "/new" in said, said
    assert "try again in a moment" not in said
    assert "sk-" not in said and "tool_use" not in said


async def test_a_summary_call_without_usage_is_billed_an_estimate(redis: Any) -> None:
    from agent_core.agent import metered
    from agent_core.agent.budget import Meter
    from agent_core.llm.base import ChatMessage
    from agent_core.settings import CoreSettings

    settings = CoreSettings(user_daily_budget_usd=5.0)
    guard = BudgetGuard(redis, settings)
    model = FnModel(lambda req: Completion("a summary " * 40), PRICED)
    req = CompletionRequest((ChatMessage("user", "summarise " * 100),))
    _result, cost = await metered.complete(model, req, Meter(guard, "web:summary-user"))
    assert 0.1 < cost < 1.0
    assert (await guard.spend("web:summary-user")).user_usd == pytest.approx(cost)


STALL_T = ThreadKey("web", "local", "stream-stall")
STALL_FULL = "The answer is 42, and here is why it matters."


class StallModel(FnModel):
    """Sends "The answer is" and the rest of the sentence right after it (within
    one stream interval), then stalls until ``release`` (a slow provider; Anthropic
    streaming a long tool-call argument sends no text)."""

    def __init__(self) -> None:
        super().__init__(lambda req: Completion(STALL_FULL))
        self.release = asyncio.Event()

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        self.requests.append(request)
        yield TextDelta("The answer is")
        yield TextDelta(" 42, and here is why it matters.")
        await self.release.wait()
        yield Completion(STALL_FULL)


async def test_text_received_before_a_stall_is_shown_during_the_stall(world: Any) -> None:
    # Before: only a new delta made an edit, so the user saw "The answer is" for
    # the whole stall although the reply already held the full sentence.
    model = StallModel()
    w = world(model)
    w.outbox.stream_interval = 0.2
    await w.start()
    await w.send(user_event(STALL_T, "what is it?"))
    try:
        for _ in range(200):
            if w.texts(STALL_T):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0)  # five stream intervals into the stall
        during = w.texts(STALL_T)
    finally:
        model.release.set()
    await w.settle(STALL_T)
    assert during == [STALL_FULL], during
    assert w.texts(STALL_T) == [STALL_FULL]


class _PreviewsRefused(RecordingOutbox):
    """Refuses every streamed (non-final) edit; counts the tries."""

    def __init__(self) -> None:
        super().__init__(stream_interval=0.05)
        self.preview_tries = 0

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        if not message.final:
            self.preview_tries += 1
            raise SendFailed("the platform refuses the edit")
        return await super().edit(ref, message)


class _BreaksAfterText(FnModel):
    """Streams a preview and more text (held back by the interval: a catch-up edit
    is due), then fails with something that is not an LLM error (a bug, Redis)."""

    def __init__(self) -> None:
        super().__init__(lambda req: Completion("unused"))

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        self.requests.append(request)
        yield TextDelta("The answer is")
        yield TextDelta(" 42.")
        raise RuntimeError("something broke mid-stream")


async def test_a_turn_that_fails_mid_stream_leaves_no_catch_up_edit_behind(world: Any) -> None:
    # Before: only an LLM error, /interrupt or a cancel ended the preview's catch-up
    # edits; after any other failure (a lost lock, Redis, a bug) a catch-up the
    # channel skipped was armed again every stream interval, for good.
    t = ThreadKey("web", "local", "catch-up-leak")
    w = world(_BreaksAfterText())
    outbox = _PreviewsRefused()
    w.outbox = outbox
    for name in list(w.outboxes):
        w.outboxes[name] = outbox
    await w.start()
    await w.send(user_event(t, "what is it?"))
    await w.settle(t)
    assert any("went wrong" in x for x in w.texts(t)), w.texts(t)
    tries = outbox.preview_tries
    for _ in range(20):  # ~20 stream intervals after the turn
        await asyncio.sleep(0.05)
    assert outbox.preview_tries == tries, (tries, outbox.preview_tries)


class _LosingWriter:
    """A ReplyWriter stand-in whose edits meet LockLost once ``lost``."""

    def __init__(self) -> None:
        self.outbox = SimpleNamespace(stream_interval=0.05)
        self.thread = ThreadKey("web", "local", "leak")
        self.lost = False
        self.edits = 0

    async def say(self, message: OutboundMessage) -> MessageRef:  # the preview
        return MessageRef("web", "local", "m1")

    async def edit(
        self, ref: MessageRef, message: OutboundMessage, *, droppable: bool = False
    ) -> MessageRef:
        self.edits += 1
        if self.lost:
            raise LockLost("thread lock lost")
        return ref


async def test_a_catch_up_edit_that_meets_a_lost_lock_is_not_armed_again() -> None:
    # Before: every failure of a catch-up edit armed it again, so a turn gone with
    # its lock (no finish, no abandon) left one trying every stream interval.
    w = _LosingWriter()
    reply = StreamingReply(w)  # type: ignore[arg-type]
    await reply.feed("Hello")  # the preview is sent
    await reply.feed(" world")  # held back by the interval: a catch-up is due
    assert reply._catch_up is not None
    w.lost = True  # the turn meets LockLost elsewhere and goes away
    for _ in range(20):
        await asyncio.sleep(0.05)
    alive = reply._catch_up is not None and not reply._catch_up.done()
    if reply._catch_up is not None:
        reply._catch_up.cancel()
    assert w.edits <= 1 and not alive, (w.edits, alive)
