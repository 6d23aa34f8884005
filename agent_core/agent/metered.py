"""Small model calls made outside the agent loop, held to the budgets.

Compaction's summaries, light routines and the heartbeat each make one call to
the cheap model.  :func:`complete` reserves its estimated cost against
DAILY_BUDGET_USD, USER_DAILY_BUDGET_USD (for the account it is billed to) and
HOURLY_ACTION_LIMIT before it starts, and books what it really cost when it
ends, exactly like a turn's calls (:class:`agent_core.agent.budget.Meter`).
"""

from __future__ import annotations

from agent_core.agent.budget import (
    Meter,
    answer_chars,
    estimated_cost,
    reserved_cost,
    unreported,
)
from agent_core.agent.tokens import estimate
from agent_core.llm.base import Completion, CompletionRequest, LLMProvider


async def complete(
    provider: LLMProvider, req: CompletionRequest, meter: Meter | None
) -> tuple[Completion, float]:
    """The answer and what it cost (USD).  Raises
    :class:`~agent_core.agent.budget.BudgetRefused` before the call when over a
    limit (nothing is called)."""
    if meter is None:
        result = await provider.complete(req)
        return result, provider.model_info(result.model or None).cost(result.usage)
    info = provider.model_info(None)
    est_usd = reserved_cost(info, estimate(list(req.messages)), req.max_tokens)
    async with meter.call(est_usd) as bill:
        result = await provider.complete(req)
        priced = provider.model_info(result.model or None)
        if unreported(result):  # no usage from the server: the prompt and the answer
            prompt = estimate(list(req.messages))
            bill.cost_usd = estimated_cost(priced, prompt, answer_chars(result, 0))
        else:
            bill.cost_usd = priced.cost(result.usage)
    return result, bill.cost_usd
