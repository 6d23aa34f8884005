"""/model refuses a name the provider does not list; a chosen model that fails says
so, with the way back."""

from __future__ import annotations

from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest
from agent_core.llm.errors import ModelNotAvailable
from tests.integration.agent.conftest import FnModel, user_event


class KnowsItsModels(FnModel):
    """Answers for the models it lists; any other name is a 404 (as OpenAI/Anthropic)."""

    def __init__(self, *a: Any, listed: list[str] | None = None, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.listed = listed

    async def list_models(self) -> list[str]:
        return self.listed if self.listed is not None else ["fn-model"]

    async def stream(self, request: CompletionRequest) -> Any:
        if request.model not in (None, "fn-model"):
            raise ModelNotAvailable(f"The model `{request.model}` does not exist")
        async for item in super().stream(request):
            yield item


async def _say(w: Any, t: ThreadKey, text: str) -> str:
    await w.send(user_event(t, text))
    await w.settle(t)
    return str(w.texts(t)[-1])


async def test_a_mistyped_model_name_is_refused_with_the_closest(world: Any) -> None:
    T = ThreadKey("telegram", "bot", "dm-model")
    w = world(KnowsItsModels(lambda req: Completion("hi there")))
    await w.start()
    said = await _say(w, T, "/model fn-modle")
    assert said.startswith("Can't switch: `fn-modle` is not one of the provider's models")
    assert "`fn-model`" in said
    assert await _say(w, T, "hello") == "hi there"  # still on the default


async def test_a_chosen_model_that_fails_says_how_to_go_back(world: Any) -> None:
    T = ThreadKey("telegram", "bot", "dm-model-unlisted")
    # a provider that lists nothing: the name is taken as given
    w = world(KnowsItsModels(lambda req: Completion("hi there"), listed=[]))
    await w.start()
    assert (await _say(w, T, "/model gpt-4o-mnii")).startswith("Switched")
    said = await _say(w, T, "hello")
    assert "`gpt-4o-mnii` chosen with /model is not available" in said
    assert "/model default" in said
    await _say(w, T, "/model default")
    assert await _say(w, T, "hello") == "hi there"
