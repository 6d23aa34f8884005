"""One model call of a turn: the request, the streamed reply, the bill.

Methods of :class:`agent_core.agent.turn.Turn`, bound there (like the approval
steps in turn_approvals.py).

A call is billed what the provider reports.  When it reports nothing (no usage
on a completed call, a cache hit aside), or the call ends early after the
provider had the prompt — cut off by /interrupt or the turn's timeout, the
turn handed back (TurnHandedBack, SendRateLimited out of the streamed answer's
send) or anything else raised while it streamed, or an LLMError after text
streamed — the budgets count an estimate instead: the
prompt, and 4 characters a token of the answer
(:func:`agent_core.agent.budget.estimated_cost`).  A
call refused before any text is not billed.  A call waiting for room in a budget
held by calls in flight (budget.py) is cut short by /interrupt like the stream: it
is never made and not billed.

A prompt too long for the model is compacted and asked again once, but only
while nothing has streamed: after text, the error ends the call like any other
(the partial answer is finished with _(cut off)_ and a notice says why), so the
user never sees a partial answer followed by a second, whole one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent_core.agent.budget import (
    DEFAULT_ANSWER_TOKENS,
    answer_chars,
    estimated_cost,
    reserved_cost,
    unreported,
)
from agent_core.agent.tokens import estimate, tools_tokens
from agent_core.llm import errors as llm_errors
from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    ModelInfo,
    TextDelta,
    ToolSpec,
)
from agent_core.llm.prices import DEFAULT_PRICE

if TYPE_CHECKING:
    from agent_core.agent.turn import Turn

log = logging.getLogger(__name__)


async def call_llm(
    self: Turn, messages: list[ChatMessage], tools: Sequence[ToolSpec]
) -> Completion:
    try:
        return await call_once(self, messages, tools)
    except llm_errors.ContextLengthExceeded as exc:
        if self.streamed_chars:  # the user saw text: a cut-off, not a second answer
            raise
        log.info("[%s] context length exceeded; compacting and retrying once", self.thread)
        history = self.session.history
        window = self.agent.window_for(self.model() or None)
        if exc.limit:  # a limit below the window (OpenAI's tokens per minute)
            # counted against it: the prompt and the answer the request allows
            info = self.agent.llm.model_info(self.model() or None)
            answer = info.max_output_tokens or DEFAULT_ANSWER_TOKENS
            window = min(window, max(exc.limit - answer, exc.limit // 2))
        await self.agent.compactor.compact(
            self.session,
            history,
            window,
            system_tokens=self.fixed_tokens(ChatMessage("system", self.system_prompt())),
            force="summarise",
            refused=True,
            meter=self.meter(),
        )
        prompt = await self.before_llm_call(history)
        return await call_once(self, prompt, tools)


async def call_once(
    self: Turn, messages: list[ChatMessage], tools: Sequence[ToolSpec]
) -> Completion:
    model = self.model() or None
    request = CompletionRequest(
        messages=tuple(messages),
        tools=tuple(tools),
        model=model,
        session_id=self.session.thread,
        turn_id=self.turn_id,
        model_chosen=bool(model and model == self.session.model),  # /model's
    )
    info = self.agent.llm.model_info(model)
    # the prompt as the provider counts it: the messages and the tools' specs
    raw = estimate(messages) + tools_tokens(tools)
    est_in = int(raw * self.session.token_ratio)
    est_usd = reserved_cost(info, est_in, request.max_tokens)  # a whole answer's worth
    self.streamed_chars = 0
    # a wait for calls in flight to settle (budget.py) ends on /interrupt, like the call
    async with self.meter().call(est_usd, wait=self.interruptible) as bill:
        try:
            final = await self.interruptible(self._stream(request))  # bench hooks it
        except BaseException as exc:
            # Cut off (/interrupt, the turn's timeout, the turn handed back while
            # the answer's first message waited for the platform, a lost lock) or
            # failed after text: the provider had the whole prompt and bills what
            # it streamed.
            if not isinstance(exc, llm_errors.LLMError) or self.streamed_chars:
                bill.cost_usd = estimated_cost(info, est_in, self.streamed_chars)
                self.session.cost_usd += bill.cost_usd
            raise
        priced = price(self, final, info)
        if unreported(final):
            cost = estimated_cost(priced, est_in, answer_chars(final, self.streamed_chars))
            log.info("[%s] no usage reported; billed an estimate", self.thread)
        else:
            cost = priced.cost(final.usage)
        bill.cost_usd = cost
    self.session.usage = self.session.usage + final.usage
    self.session.cost_usd += cost
    prompt_tokens = final.usage.prompt
    if prompt_tokens > 0 and raw > 0:
        # calibrated on what the report covers (the tools' specs too): against the
        # messages alone a short exchange would sit at the cap and make every later
        # estimate ~3x too big
        self.session.token_ratio = max(0.3, min(3.0, prompt_tokens / raw))
        self.session.last_prompt_tokens = prompt_tokens
    return final


async def stream_reply(self: Turn, request: CompletionRequest) -> Completion:
    reply = self.writer.stream()
    self._reply = reply
    final: Completion | None = None
    async for item in self.agent.llm.stream(request):
        if isinstance(item, TextDelta):
            self.streamed_chars += len(item.text)
            await reply.feed(item.text)
        else:
            final = item
    if final is None:
        raise llm_errors.InvalidResponse("stream ended without a final message")
    if final.tool_calls and reply.ref is not None:
        # keep the streamed preamble as sent, stripped like any answer
        await reply.finish(final.text.strip() or None)
    return final


def price(self: Turn, final: Completion, asked: ModelInfo) -> ModelInfo:
    """Prices of the model that answered (a cheap route, a failover) when known;
    else those of the model asked for (a server may echo a name of its own)."""
    if not final.model or final.model == asked.name:
        return asked
    info = self.agent.llm.model_info(final.model)
    unknown = (info.input_cost_per_token, info.output_cost_per_token) == (
        DEFAULT_PRICE.input_cost_per_token,
        DEFAULT_PRICE.output_cost_per_token,
    )
    return asked if unknown else info
