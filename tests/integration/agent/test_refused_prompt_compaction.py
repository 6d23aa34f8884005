"""The provider refused the prompt as too long: the compaction shortened an older
round's result and stopped there (its own estimate, the one the provider had just
proved too low, now looked fine), never the latest round's; the retry was refused
again and a conversation of one turn was told it was too long, to send /new.  Now
what was refused counts as at least the whole window."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agent_core.agent.context import SUMMARY_SYSTEM, Compactor
from agent_core.agent.session import Session
from agent_core.agent.tokens import estimate
from agent_core.events import ThreadKey
from agent_core.llm import errors as llm_errors
from agent_core.llm.base import ChatMessage, Completion, CompletionRequest, ModelInfo, ToolCall
from agent_core.tools.base import Tool, ToolContext
from tests.integration.agent.conftest import FnModel, last_user, user_event

WINDOW = 32_000
DENSE = "abcdefghij" * 2_000  # 20,000 chars, one "word": ~2 chars a real token


class PageArgs(BaseModel):
    n: int = 0


class Page(Tool[PageArgs]):
    name = "page"
    description = "fetch a page"
    args_model = PageArgs

    async def run(self, args: PageArgs, ctx: ToolContext) -> str:
        return f"page{args.n} " + (DENSE[:2_000] if args.n == 0 else DENSE)


def real_tokens(req: CompletionRequest) -> int:
    return sum(len(m.content) for m in req.messages) // 2


async def test_refused_prompt_gets_its_latest_round_shortened(world: Any) -> None:
    def rule(req: CompletionRequest) -> Completion:
        m = req.messages[-1]
        if m.role == "user" and m.content == "research":
            return Completion("", tool_calls=(ToolCall("c0", "page", {"n": 0}),))
        if m.role == "tool" and m.tool_call_id == "c0":
            calls = tuple(ToolCall(f"c{i}", "page", {"n": i}) for i in range(1, 5))
            return Completion("", tool_calls=calls)
        if real_tokens(req) > WINDOW:
            raise llm_errors.ContextLengthExceeded("prompt is too long")
        return Completion("the findings")

    t = ThreadKey("web", "local", "forced-fresh")
    w = world(FnModel(rule), context_window=WINDOW)
    orig = w.make_agent

    def make_agent() -> Any:
        agent = orig()
        agent.tools.add(Page())
        return agent

    w.make_agent = make_agent
    await w.start()
    await w.send(user_event(t, "research"))
    await w.settle(t)
    texts = w.texts(t)
    assert texts and texts[-1] == "the findings", texts


async def test_forced_compaction_shortens_the_latest_round_too() -> None:
    async def archive(s: Session, msgs: list[ChatMessage]) -> None: ...

    h = [ChatMessage("user", "research")]
    h.append(ChatMessage("assistant", "", tool_calls=(ToolCall("c0", "page", {}),)))
    h.append(ChatMessage("tool", DENSE[:2_000], tool_call_id="c0", name="page"))
    calls = tuple(ToolCall(f"c{i}", "page", {}) for i in range(1, 5))
    h.append(ChatMessage("assistant", "", tool_calls=calls))
    h += [ChatMessage("tool", DENSE, tool_call_id=c.id, name="page") for c in calls]
    comp = Compactor(lambda: FnModel(lambda r: Completion("summary")), archive)
    s = Session("web:local:forced", history=h)
    # the provider refused a prompt Parley estimated at 70 % (dense text)
    await comp.compact(s, h, int(estimate(h) / 0.7), force="summarise", refused=True)
    fresh = [len(m.content) for m in h[4:]]
    assert any(n < 1_000 for n in fresh), fresh


async def test_a_prompt_over_the_tokens_per_minute_limit_is_compacted_under_it(
    world: Any,
) -> None:
    """OpenAI's 429 "Request too large ... (TPM): Limit 18000" for a prompt far below
    the window: the compaction aims under that limit, not under the window (keeping
    the last 5 turns left the prompt over the limit, and the retry was refused
    again)."""
    limit = 18_000
    big = "word " * 3_800  # ~5,000 tokens a turn

    def rule(req: CompletionRequest) -> Completion:
        if req.messages[0].content == SUMMARY_SYSTEM:
            return Completion("the summary")
        # OpenAI counts the prompt and the answer the request allows (4,096 here)
        if last_user(req) == "and now?" and estimate(list(req.messages)) + 4096 > limit:
            raise llm_errors.ContextLengthExceeded(
                "openai:gpt-4o: HTTP 429: Request too large ... (TPM): Limit 18000", limit
            )
        return Completion("ok")

    t = ThreadKey("web", "local", "tpm-limit")
    w = world(FnModel(rule), context_window=200_000)
    await w.start()
    for i in range(8):
        await w.send(user_event(t, f"part {i}: {big}"))
        await w.settle(t)
    await w.send(user_event(t, "and now?"))
    await w.settle(t)
    texts = w.texts(t)
    assert len(texts) == 9 and texts[-1] == "ok", texts[-1]


async def test_the_tokens_per_minute_compaction_leaves_room_for_the_answer(
    world: Any,
) -> None:
    """The limit counts the prompt and the answer the request allows: with an
    8,000-token answer budget, a prompt compacted under the limit alone was still
    refused on the retry."""
    limit, answer = 18_000, 8_000
    big = "word " * 3_800

    def rule(req: CompletionRequest) -> Completion:
        if req.messages[0].content == SUMMARY_SYSTEM:
            return Completion("the summary")
        if last_user(req) == "and now?" and estimate(list(req.messages)) + answer > limit:
            raise llm_errors.ContextLengthExceeded(
                "openai:gpt-4o: HTTP 429: Request too large ... (TPM): Limit 18000", limit
            )
        return Completion("ok")

    t = ThreadKey("web", "local", "tpm-answer")
    info = ModelInfo("fn-model", context_window=200_000, max_output_tokens=answer)
    w = world(FnModel(rule, info), context_window=200_000)
    await w.start()
    for i in range(8):
        await w.send(user_event(t, f"part {i}: {big}"))
        await w.settle(t)
    await w.send(user_event(t, "and now?"))
    await w.settle(t)
    assert w.texts(t)[-1] == "ok", w.texts(t)[-1]
