"""Smart routing: the classification table, where each class goes, the cascade."""

from __future__ import annotations

import pytest

from agent_core.llm.base import ChatMessage, Completion, CompletionRequest, TextDelta, ToolSpec
from agent_core.llm.routing import Complexity, SmartRouting, classify, is_uncertain
from tests.fakes.llm_servers import ScriptedProvider

MODERATE = "Tell me about the history of the city where I live, " * 5  # ~260 chars, no markers


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("hi", Complexity.SIMPLE),
        ("debug", Complexity.SIMPLE),  # anything <= 10 chars
        ("What is the capital of France?", Complexity.SIMPLE),
        ("show " + "me all the things " * 20, Complexity.SIMPLE),  # long, but a simple word
        ("help " + "x" * 300, Complexity.SIMPLE),
        (MODERATE, Complexity.MODERATE),
        ("Please refactor this function to be faster", Complexity.COMPLEX),
        ("Can you analyze my logs?", Complexity.COMPLEX),
        ("what's the architecture here", Complexity.COMPLEX),
        ("fix it:\n```py\nx = 1\n```", Complexity.COMPLEX),
        ("ab " * 400, Complexity.COMPLEX),  # >= 1000 chars
    ],
)
def test_classify(text: str, kind: Complexity) -> None:
    assert classify(text) is kind


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "  ",
        "I'm not sure about that.",
        "Honestly, I don’t know.",
        "I cannot help",
        "I need more context",
    ],
)
def test_uncertain_answers(answer: str) -> None:
    assert is_uncertain(answer)


def test_confident_answer() -> None:
    assert not is_uncertain("Paris is the capital of France.")


def req(text: str, **kw: object) -> CompletionRequest:
    return CompletionRequest((ChatMessage("user", text),), **kw)  # type: ignore[arg-type]


async def test_simple_goes_cheap_complex_and_tools_go_primary() -> None:
    inner = ScriptedProvider("openai:gpt-4o")
    r = SmartRouting(inner, "gpt-4o-mini")
    await r.complete(req("hello"))
    await r.complete(req("please implement a parser"))
    await r.complete(req("hello", tools=(ToolSpec("t", "", {}),)))
    assert [c.model for c in inner.calls] == ["gpt-4o-mini", None, None]
    assert (r.total, r.cheap_count, r.primary, r.escalations) == (3, 1, 2, 0)


async def test_moderate_escalates_when_the_cheap_answer_is_unsure() -> None:
    inner = ScriptedProvider(
        "openai:gpt-4o", Completion("I'm not sure, sorry."), Completion("Here is the history...")
    )
    r = SmartRouting(inner, "gpt-4o-mini")
    out = await r.complete(req(MODERATE))
    assert out.text == "Here is the history..."
    assert [c.model for c in inner.calls] == ["gpt-4o-mini", None]
    assert r.escalations == 1


async def test_moderate_confident_answer_stays_cheap() -> None:
    inner = ScriptedProvider("openai:gpt-4o", Completion("It was founded in 1200."))
    r = SmartRouting(inner, "gpt-4o-mini")
    assert (await r.complete(req(MODERATE))).text == "It was founded in 1200."
    assert r.escalations == 0 and len(inner.calls) == 1


async def test_no_cascade_keeps_the_unsure_answer() -> None:
    inner = ScriptedProvider("openai:gpt-4o", Completion(""))
    r = SmartRouting(inner, "gpt-4o-mini", cascade=False)
    assert (await r.complete(req(MODERATE))).text == ""
    assert len(inner.calls) == 1


async def test_stream_escalation_hides_the_unsure_text() -> None:
    unsure = [TextDelta("I don't "), TextDelta("know."), Completion("I don't know.")]
    good = [TextDelta("Founded "), TextDelta("1200."), Completion("Founded 1200.")]
    inner = ScriptedProvider("openai:gpt-4o", unsure, good)
    r = SmartRouting(inner, "gpt-4o-mini")
    items = [i async for i in r.stream(req(MODERATE))]
    assert items == good
    assert r.escalations == 1


async def test_stream_confident_moderate_answer_is_flushed() -> None:
    long = "x" * 250
    inner = ScriptedProvider(
        "openai:gpt-4o",
        [TextDelta(long[:150]), TextDelta(long[150:]), TextDelta("!"), Completion(long + "!")],
    )
    r = SmartRouting(inner, "gpt-4o-mini")
    items = [i async for i in r.stream(req(MODERATE))]
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == long + "!"
    assert items[-1] == Completion(long + "!")


async def test_off_without_cheap_model_and_cheap_accessor() -> None:
    inner = ScriptedProvider("openai:gpt-4o")
    off = SmartRouting(inner)
    await off.complete(req("hello"))
    assert inner.calls[0].model is None
    assert off.cheap() is inner
    on = SmartRouting(inner, "gpt-4o-mini")
    await on.cheap().complete(req("summarise this long conversation please " * 50))
    assert inner.calls[-1].model == "gpt-4o-mini"
    assert on.cheap().name == "openai:gpt-4o-mini"


async def test_explicit_model_is_not_rerouted() -> None:
    inner = ScriptedProvider("openai:gpt-4o")
    r = SmartRouting(inner, "gpt-4o-mini")
    await r.complete(req("hello", model="o3"))
    assert inner.calls[0].model == "o3"
