"""The prompt's tool specs are counted in the context estimate and its calibration.

What the user saw: after a short "hi", a request that made the model fetch three
pages got answered from 300 characters of two of them.  The provider's reported
prompt carries the tool schemas (and a tool-use preamble), the estimate counted
the messages only, so the calibrated ratio sat at its 3.0 cap; the next step (the
three results) was estimated at ~3x its size, compaction fired at ~40 % real fill
and shortened the results the model had just fetched, before it saw them.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel

from agent_core.agent.context import Compactor
from agent_core.agent.session import Session
from agent_core.agent.tokens import estimate, text_tokens
from agent_core.events import ThreadKey
from agent_core.llm.base import ChatMessage, Completion, CompletionRequest, TokenUsage, ToolCall
from agent_core.tools.base import Tool, ToolContext
from tests.integration.agent.conftest import FnModel, user_event

T = ThreadKey("web", "local", "tool-specs-ratio")
WINDOW = 32_000
PAGE = "lorem ipsum dolor sit amet " * 600


class PageArgs(BaseModel):
    n: int = 0


class Page(Tool[PageArgs]):
    name = "page"
    description = "fetch a page"
    args_model = PageArgs

    async def run(self, args: PageArgs, ctx: ToolContext) -> str:
        return (f"page{args.n} " + PAGE)[:15_000]


def reported_prompt(req: CompletionRequest) -> int:
    """What a provider reports: the messages, the tool schemas and a small tool-use
    preamble (~350 tokens on Anthropic)."""
    specs = orjson.dumps(
        [{"name": t.name, "description": t.description, "schema": t.parameters} for t in req.tools]
    ).decode()
    return int(estimate(list(req.messages)) + text_tokens(specs) + 350)


async def test_fresh_tool_results_stay_whole_at_40_percent_fill(world: Any) -> None:
    seen: list[CompletionRequest] = []

    def rule(req: CompletionRequest) -> Completion:
        seen.append(req)
        usage = TokenUsage(reported_prompt(req), 5)
        m = req.messages[-1]
        if m.role == "user" and m.content == "fetch three pages":
            calls = tuple(ToolCall(f"c{i}", "page", {"n": i}) for i in range(3))
            return Completion("", tool_calls=calls, usage=usage)
        return Completion("ok", usage=usage)

    w = world(FnModel(rule), context_window=WINDOW)
    orig = w.make_agent

    def make_agent() -> Any:
        agent = orig()
        agent.tools.add(Page())
        return agent

    w.make_agent = make_agent
    await w.start()
    await w.send(user_event(T, "hi"))
    await w.settle(T)
    ratio = (await w.session(T)).token_ratio
    assert 0.9 < ratio < 1.5, ratio  # the specs are counted: no 3.0 cap after "hi"
    await w.send(user_event(T, "fetch three pages"))
    await w.settle(T)

    results = [m for m in seen[-1].messages if m.role == "tool"]
    fill = reported_prompt(seen[-1]) / WINDOW
    assert fill < 0.5  # far from any compaction level
    assert len(results) == 3
    assert [len(m.content) for m in results] == [15_000] * 3, [m.content[:80] for m in results]


async def test_latest_round_is_not_shortened_while_older_rounds_are() -> None:
    """A turn too big for the window alone: the older rounds' results are shortened,
    the latest round (not seen by the model yet) stays whole, all of it."""

    async def archive(s: Session, msgs: list[ChatMessage]) -> None: ...

    h = [ChatMessage("user", "research this")]
    for r in range(2):
        calls = tuple(ToolCall(f"r{r}c{i}", "page", {"n": i}) for i in range(3))
        h.append(ChatMessage("assistant", "", tool_calls=calls))
        h += [ChatMessage("tool", PAGE, tool_call_id=c.id, name="page") for c in calls]
    comp = Compactor(lambda: FnModel(lambda r: Completion("summary")), archive)
    s = Session("web:local:rounds", history=h)
    res = await comp.compact(s, h, int(estimate(h) / 0.9))  # the summarise level
    assert res is not None and res.strategy == "shortened"
    assert [len(m.content) < 1000 for m in h if m.role == "tool"] == [True] * 3 + [False] * 3
