"""Conversation state: compaction of short conversations, token estimates for text
without spaces, what summaries cost, and the figures /cost, /status and /context show."""

from __future__ import annotations

from typing import Any

from agent_core.agent.context import (
    REASONING_SUMMARY_MAX_TOKENS,
    SUMMARY_MAX_TOKENS,
    Compactor,
    estimate,
)
from agent_core.agent.session import Session
from agent_core.events import ThreadKey
from agent_core.llm.base import ChatMessage, Completion, ModelInfo, TokenUsage
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import PriceTable
from agent_core.llm.schema import LENGTH_NOTE
from tests.fakes.llm_servers import FakeLLMServer, Reply, openai_text
from tests.integration.agent.conftest import FnModel, user_event
from tests.unit.llm.conftest import config_for

T = ThreadKey("web", "local", "audit-ctx")


def _history(turns: int, words: int = 100) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for i in range(turns):
        out.append(ChatMessage("user", f"turn {i} " + "word " * words))
        out.append(ChatMessage("assistant", "answer " * words))
    return out


def _compactor(archived: list[ChatMessage]) -> tuple[Compactor, list[Any]]:
    asked: list[Any] = []

    def rule(req: Any) -> Completion:
        asked.append(req)
        return Completion("SUMMARY: the user pasted the design doc (id 42)")

    async def archive(session: Session, msgs: list[ChatMessage]) -> None:
        archived.extend(msgs)

    return Compactor(lambda: FnModel(rule), archive), asked


# --- F1: few big turns -> truncation without any summary ---------------------------
async def test_compact_command_on_short_conversation_summarises_not_truncates() -> None:
    """/compact ("summarise older turns now") on a 4-turn conversation summarises
    what it drops (before, turn 1 went with no summary: the model forgot it)."""
    comp, _asked = _compactor([])
    h = _history(4, 2000)
    s = Session(str(T), history=h)
    res = await comp.compact(s, h, 100_000, force="summarise")
    assert res is not None
    assert res.strategy == "summarised", res
    assert s.summary, "older turns left the prompt without a summary"


async def test_auto_compaction_at_82_percent_with_few_turns_keeps_a_summary() -> None:
    """At 82 % (the 'move' band) with 6 big turns, compaction keeps fewer turns at
    the same level instead of truncating to the last 3."""
    comp, _asked = _compactor([])
    h = _history(6, 2000)
    s = Session(str(T), history=h)
    res = await comp.compact(s, h, int(estimate(h) / 0.82))
    assert res is not None
    dropped_without_summary = res.strategy == "truncated" and not s.summary
    assert not dropped_without_summary, res


async def test_a_summary_cut_by_the_length_limit_keeps_no_note_for_people() -> None:
    """The provider's answer ends with the note for a reader that it was cut; in a
    summary it would be carried in every later system prompt."""

    def rule(req: Any) -> Completion:
        return Completion(f"SUMMARY: the user wants a plan\n\n{LENGTH_NOTE}")

    async def archive(session: Session, msgs: list[ChatMessage]) -> None:
        pass

    comp = Compactor(lambda: FnModel(rule), archive)
    h = _history(4, 2000)
    s = Session(str(T), history=h)
    assert await comp.compact(s, h, 100_000, force="summarise") is not None
    assert "SUMMARY: the user wants a plan" in s.summary
    assert LENGTH_NOTE not in s.summary and "cut off" not in s.summary


# --- F2: one long tool-using turn cannot be compacted -------------------------------
def test_estimate_of_cjk_text_is_not_a_few_tokens() -> None:
    """Chinese/Japanese/Thai text has no spaces: 3,000 characters must not estimate
    as ~5 tokens (real: ~2,000-3,000), or compaction never triggers before the
    provider's 400."""
    msg = ChatMessage("user", "这是一个关于项目计划的很长的中文段落。" * 160)  # ~3,000 chars
    assert estimate([msg]) >= 1000, estimate([msg])


# --- F4: summary calls bypass usage / cost / budget ---------------------------------
async def test_compact_summary_call_is_counted_in_usage(world: Any) -> None:
    def rule(req: Any) -> Completion:
        if req.temperature == 0.3:  # the summariser
            return Completion("summary", usage=TokenUsage(5000, 300))
        return Completion("ok", usage=TokenUsage(10, 5))

    w = world(FnModel(rule, ModelInfo("m", input_cost_per_token=1e-6)))
    await w.start()
    from agent_core.store import keys

    s0 = Session(str(T), history=_history(12, 200))
    await w.redis.hset(keys.session(T), mapping={"v": 1, "d": s0.to_json()})
    await w.send(user_event(T, "/compact"))
    await w.settle(T)
    assert "Compacted (summarised)" in w.texts(T)[-1]
    s = await w.session(T)
    assert s.usage.input >= 5000, f"summary tokens not counted: {s.usage}"
    assert s.cost_usd > 0


# --- F5: /new keeps the old conversation's cost ---------------------------------------
async def test_cost_after_new_is_for_the_new_conversation(world: Any) -> None:
    w = world(FnModel(lambda req: Completion("hi", usage=TokenUsage(1000, 50))))
    await w.start()
    for text in ("one", "two", "/new", "/cost"):
        await w.send(user_event(T, text))
        await w.settle(T)
    out = w.texts(T)[-1]
    assert "(0 prompt + 0 output tokens)" in out, out


# --- F6: /status and /context disagree --------------------------------------------------
async def test_status_and_context_report_the_same_fill(world: Any) -> None:
    import re

    w = world(FnModel(lambda req: Completion("hi")), context_window=20_000)
    await w.start()
    from agent_core.store import keys

    s0 = Session(str(T), history=_history(2, 10), summary="fact " * 3000)
    await w.redis.hset(keys.session(T), mapping={"v": 1, "d": s0.to_json()})
    await w.send(user_event(T, "/status"))
    await w.settle(T)
    await w.send(user_event(T, "/context"))
    await w.settle(T)
    status, context = w.texts(T)[-2], w.texts(T)[-1]
    pct_status = int(re.search(r"\((\d+)%\)", status).group(1))  # type: ignore[union-attr]
    pct_context = int(re.search(r"\((\d+)%\)", context).group(1))  # type: ignore[union-attr]
    assert abs(pct_status - pct_context) <= 2, (status, context)


async def test_one_long_tool_turn_is_shortened_to_fit_and_stays_valid() -> None:
    """One request followed by many tool rounds outgrows the window alone: the older
    tool results of that turn are shortened (every call keeps its result, the request
    and the last results stay whole) instead of nothing happening."""
    from agent_core.llm.base import ToolCall

    comp, _asked = _compactor([])
    h: list[ChatMessage] = [ChatMessage("user", "research the topic and report")]
    for i in range(20):
        call = ToolCall(f"c{i}", "http_request", {"url": f"https://example.com/{i}"})
        h.append(ChatMessage("assistant", "", tool_calls=(call,)))
        h.append(
            ChatMessage("tool", "page text " * 1500, tool_call_id=f"c{i}", name="http_request")
        )
    s = Session(str(T), history=h)
    window = int(estimate(h) / 1.2)  # 120 % full
    res = await comp.compact(s, h, window)
    assert res is not None and res.strategy == "shortened"
    assert estimate(h) <= window * 0.95
    assert h[0].content == "research the topic and report"
    calls = [c.id for m in h for c in m.tool_calls]
    results = [m.tool_call_id for m in h if m.role == "tool"]
    assert calls == results == [f"c{i}" for i in range(20)]
    assert "omitted" not in h[-1].content and "omitted" in h[2].content


# --- summaries on reasoning models ----------------------------------------------------
REASONING_NEEDED = 2_000  # hidden reasoning tokens the fake model spends before writing


def _reasoner() -> Any:
    """A reasoning model as OpenAI runs one: reasoning tokens count against
    max_completion_tokens, and a budget they use up gives an empty answer cut by
    the length limit."""

    def answer(path: str, body: dict[str, Any]) -> Reply:
        budget = body.get("max_completion_tokens") or body.get("max_tokens")
        if budget is not None and budget <= REASONING_NEEDED:
            usage = {
                "prompt_tokens": 900,
                "completion_tokens": budget,
                "total_tokens": 900 + budget,
                "completion_tokens_details": {"reasoning_tokens": budget},
            }
            return openai_text("", usage=usage, finish="length")
        return openai_text("The user asked about invoices 17 and 18.")

    return answer


async def _summarise_over_the_wire(backend: str, **config: Any) -> tuple[Session, list[Any]]:
    """Compact a conversation with ``backend`` against a fake reasoning model: the
    session, and the bodies of the summary calls sent."""
    archived: list[ChatMessage] = []

    async def archive(session: Session, old: list[ChatMessage]) -> None:
        archived.extend(old)

    s = Session(str(T), history=_history(8, 10))
    async with FakeLLMServer() as server:
        server.responder = _reasoner()
        p = OpenAIProvider(config_for(server, backend, **config), PriceTable())
        await p.initialize()
        try:
            await Compactor(lambda: p, archive).compact(s, s.history, 400_000, force="summarise")
        finally:
            await p.shutdown()
    assert archived
    return s, [r.body for r in server.requests if r.path.endswith("/chat/completions")]


async def test_a_summary_on_gpt5_gets_a_budget_for_its_reasoning() -> None:
    """gpt-5 spent the summary call's 1,024 tokens on hidden reasoning: the summary
    came back empty and the older turns were dropped with no summary at all."""
    s, sent = await _summarise_over_the_wire("openai", openai_model="gpt-5")
    assert s.summary == "The user asked about invoices 17 and 18."
    assert len(sent) == 1
    assert sent[0]["max_completion_tokens"] == REASONING_SUMMARY_MAX_TOKENS
    assert sent[0]["reasoning_effort"] == "low"


async def test_an_empty_summary_cut_by_the_limit_is_asked_again_with_more_room() -> None:
    """A reasoning model the price table does not know (a compatible server's):
    the 1,024-token summary comes back empty at the length limit, so it is asked
    once more with a larger budget instead of truncating."""
    s, sent = await _summarise_over_the_wire("openai_compatible")
    assert s.summary == "The user asked about invoices 17 and 18."
    assert [b["max_tokens"] for b in sent] == [SUMMARY_MAX_TOKENS, REASONING_SUMMARY_MAX_TOKENS]
    assert all("reasoning_effort" not in b for b in sent)  # not a known reasoning model
