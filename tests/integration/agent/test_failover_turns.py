"""Failover across a conversation's turns: one transient failure of the primary moves
that turn to the fallback, not the conversation for good; a model chosen with /model
that the provider does not know is said to be unavailable, not answered by a fallback."""

from __future__ import annotations

from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest
from agent_core.llm.errors import ModelNotAvailable, RequestFailed
from agent_core.llm.failover import Failover
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event


class Primary(FnModel):
    """Lists no models (a /model name is taken as given); answers only its own and
    ``known``; ``fail`` transient failures first (a 503)."""

    name = "primary:fn-model"

    def __init__(self, *a: Any, known: tuple[str, ...] = (), **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.known = known
        self.fail = 0
        self.attempts: list[CompletionRequest] = []

    async def list_models(self) -> list[str]:
        return []

    async def stream(self, request: CompletionRequest) -> Any:
        self.attempts.append(request)
        if self.fail:
            self.fail -= 1
            raise RequestFailed("primary: HTTP 503")
        if request.model not in (None, "fn-model", *self.known):
            raise ModelNotAvailable(f"The model `{request.model}` does not exist")
        async for item in super().stream(request):
            yield item


class Fallback(FnModel):
    name = "fallback:fn-model"

    async def stream(self, request: CompletionRequest) -> Any:
        async for item in super().stream(request):
            if isinstance(item, Completion):
                item = Completion("fallback: " + item.text, item.tool_calls, item.usage)
            yield item


def chain(rule: Any, known: tuple[str, ...] = ()) -> tuple[Failover, Primary, Fallback]:
    primary, fallback = Primary(rule, known=known), Fallback(rule)
    return Failover([primary, fallback], threshold=3, cooldown_secs=300), primary, fallback


async def _say(w: Any, t: ThreadKey, text: str) -> str:
    await w.send(user_event(t, text))
    await w.settle(t)
    return str(w.texts(t)[-1])


async def test_one_503_moves_one_turn_the_next_is_the_primarys_with_its_model(
    world: Any,
) -> None:
    T = ThreadKey("telegram", "bot", "dm-failover-turns")
    f, primary, fallback = chain(lambda req: Completion("hi: " + req.messages[-1].content))
    w = world(f)
    await w.start()
    assert (await _say(w, T, "/model big-model")).startswith("Switched")
    primary.known = ("big-model",)
    primary.fail = 1
    assert await _say(w, T, "one") == "fallback: hi: one"
    assert await _say(w, T, "two") == "hi: two"  # the primary recovered: used again
    assert primary.attempts[-1].model == "big-model"  # with the /model choice
    assert await _say(w, T, "three") == "hi: three"
    assert len(fallback.requests) == 1


async def test_a_tool_loop_stays_on_the_provider_its_turn_moved_to(world: Any) -> None:
    """Within one turn the fallback keeps the calls (its prompt cache is warm, the tool
    calls are its own); the next turn goes back to the primary."""
    T = ThreadKey("telegram", "bot", "dm-failover-loop")
    rule = tools_then_answer(("look", [call("sleepy", label="seen")]))
    f, primary, fallback = chain(rule)
    w = world(f)
    await w.start()
    primary.fail = 1
    assert await _say(w, T, "look") == "fallback: done: seen"
    assert len(fallback.requests) == 2 and len(primary.attempts) == 1
    assert await _say(w, T, "hello") == "echo: hello"


async def test_a_mistyped_model_says_it_is_not_available(world: Any) -> None:
    T = ThreadKey("telegram", "bot", "dm-failover-typo")
    f, _primary, fallback = chain(lambda req: Completion("hi there"))
    w = world(f)
    await w.start()
    assert (await _say(w, T, "/model gpt-4o-mnii")).startswith("Switched")
    said = await _say(w, T, "hello")
    assert "`gpt-4o-mnii` chosen with /model is not available" in said, w.texts(T)
    assert fallback.requests == []  # not answered behind the user's back
    await _say(w, T, "/model default")
    assert await _say(w, T, "hello") == "hi there"  # the primary's, not pinned elsewhere
    assert fallback.requests == []
