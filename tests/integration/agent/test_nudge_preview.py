"""A nudged answer ("I'll use the tool…" with no call) is shown whole, never left
as a cut-off streamed preview."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, StreamItem, TextDelta
from tests.integration.agent.conftest import FnModel, user_event

T = ThreadKey("web", "local", "review-llm")


class PiecesModel(FnModel):
    """Streams each answer word by word, as every real backend does."""

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        c = await self.complete(request)
        for word in c.text.split(" "):
            yield TextDelta(word + " ")
        yield c


async def test_nudged_answer_is_not_left_as_a_truncated_preview(world: Any) -> None:
    answers = iter(["I'll use the current_time tool to check that for you.", "It is noon."])

    def rule(req: CompletionRequest) -> Completion:
        return Completion(next(answers))

    w = world(PiecesModel(rule))
    w.outbox.stream_interval = 1.0  # Telegram's interval: edits at most once a second
    await w.start()
    await w.send(user_event(T, "what time is it?"))
    await w.settle(T)
    shown = w.texts(T)
    # every message the user is left with is whole: no half sentence from the nudged call
    assert all(
        t in ("I'll use the current_time tool to check that for you.", "It is noon.") for t in shown
    ), shown


async def test_a_nudged_answer_is_not_posted_where_nothing_streamed(world: Any) -> None:
    answers = iter(["I'll use the current_time tool to check that for you.", "It is noon."])
    w = world(PiecesModel(lambda req: Completion(next(answers))))
    assert w.outbox.stream_interval is None  # a channel that does not stream
    await w.start()
    t = ThreadKey("web", "local", "nudge-no-stream")
    await w.send(user_event(t, "what time is it?"))
    await w.settle(t)
    assert w.texts(t) == ["It is noon."]


async def test_a_complete_answer_naming_a_command_is_not_nudged(world: Any) -> None:
    """ "You can rename it using the mv command: `mv old.txt new.txt`." was taken for
    an announced tool call ("using the"): the model was asked again, and on a
    streaming channel the person got a second answer under the first."""
    answer = "You can rename it using the mv command: `mv old.txt new.txt`."
    answers = iter([answer, "As I said: use mv old.txt new.txt."])
    model = PiecesModel(lambda req: Completion(next(answers)))
    w = world(model)
    w.outbox.stream_interval = 1.0  # a streaming channel (Telegram's pace)
    await w.start()
    t = ThreadKey("web", "local", "nudge-false-positive")
    await w.send(user_event(t, "how do I rename a file on linux?"))
    await w.settle(t)
    assert len(model.requests) == 1
    assert w.texts(t) == [answer]
