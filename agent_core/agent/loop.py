"""The agentic loop: LLM -> tools -> results -> repeat, until a text answer.

One function, :func:`run_loop`, driven by a :class:`LoopDelegate` whose hooks
own every side effect (Redis, channels, tools).  The loop itself only decides
what happens next, which keeps it small and testable with a scripted delegate.

Only the LLM's text answer ends a turn (``Response``).  Tool output is data fed
back to the LLM; it can never end the turn or approve anything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent_core.llm.base import ChatMessage, Completion, ToolCall, ToolSpec


@dataclass(frozen=True, slots=True)
class Response:
    text: str


@dataclass(frozen=True, slots=True)
class Stopped:
    reason: str


@dataclass(frozen=True, slots=True)
class MaxIterations:
    iterations: int


@dataclass(frozen=True, slots=True)
class NeedApproval:
    """A tool call waits for a person; ``remaining`` are calls not yet run."""

    approval_id: str
    call: ToolCall
    remaining: tuple[ToolCall, ...] = ()


LoopOutcome = Response | Stopped | MaxIterations | NeedApproval


@dataclass
class Signals:
    """What ``check_signals`` reports between iterations."""

    injected: list[ChatMessage] = field(default_factory=list)  # new user messages
    stop: str = ""  # non-empty: stop the turn with this reason


@dataclass
class ToolRound:
    """Result of executing one LLM response's tool calls."""

    results: list[ChatMessage]  # role=tool, in the calls' original order
    approval: NeedApproval | None = None  # set: stop here and ask
    stop: str = ""  # non-empty: loop detection (or a hook) stopped the turn
    notes: list[ChatMessage] = field(default_factory=list)  # e.g. loop warnings to the LLM


class LoopDelegate(Protocol):
    async def check_signals(self) -> Signals: ...

    async def before_llm_call(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """Last look at the prompt (compaction, budget checks). May raise to stop."""
        ...

    def tools(self) -> Sequence[ToolSpec]: ...

    async def call_llm(self, messages: list[ChatMessage], tools: Sequence[ToolSpec]) -> Completion:
        """Ask the model (streaming its text to the channel as it comes)."""
        ...

    async def handle_text(self, completion: Completion) -> None:
        """The model answered with text and no tool calls: deliver it."""
        ...

    async def keep_streamed(self, completion: Completion) -> None:
        """A call's text that is no answer (the model was nudged): if part of it was
        already shown, show it whole; post nothing new."""
        ...

    async def execute_tool_calls(self, calls: Sequence[ToolCall]) -> ToolRound: ...

    async def after_iteration(self, iteration: int) -> None: ...


# an announced tool call: the answer's last sentence says, in the first person and
# the future, that it is about to use, call, check... ("I'll check that.", "Let me
# look that up.", "Sure, I will run it now.", "Sure - I'll check."), after at most
# a short lead ("Sure,"); "get" only with an object ("I'll get back to you" is not)
_INTENT = re.compile(
    r"^(?:[\w']+(?:\s+[\w']+){0,2}\s*[,!\u2014\u2013-]\s*)?"
    r"(?:i'll|i will|let me(?!\s+know)|i'm going to|i am going to)\s+"
    r"(?:[\w']+\s+){0,2}?"
    r"(?:use|call|check|run|look|search|fetch|find|query|open|read|verify"
    r"|get(?=\s+(?:the|that|this|it|those|these|your|some|a|an)\b))\b"
)
_SENTENCE_END = re.compile(r"(?<=[.!?:…])\s+")
# a closing pleasantry after the announcement ("Let me check. One moment!")
_FILLER = re.compile(
    r"^(?:one (?:moment|sec(?:ond)?)|just a (?:moment|sec(?:ond)?|minute)|please wait"
    r"|hold on|bear with me|stand by|be right back)\b[^\w]*$"
)
# an answer longer than this says something itself, whatever its last sentence
INTENT_MAX_CHARS = 300

NUDGE = (
    "You said you would use a tool but did not call one. If a tool is needed, "
    "call it now; otherwise give your final answer."
)


def says_tool_intent(text: str, tools: Sequence[ToolSpec]) -> bool:
    """Did the model announce a tool call instead of making it?  Only a short answer
    whose last sentence is first-person future intent counts ("I'll check the
    time.", "Let me look that up."); a complete answer that names a tool, a
    command or says "using the" is an answer."""
    if not tools:
        return False
    low = text.strip().lower().replace("\u2019", "'")
    if not low or len(low) > INTENT_MAX_CHARS:
        return False
    sentences = _SENTENCE_END.split(low)
    while len(sentences) > 1 and _FILLER.match(sentences[-1]):
        sentences.pop()
    return _INTENT.match(sentences[-1]) is not None


async def run_loop(
    delegate: LoopDelegate,
    history: list[ChatMessage],
    *,
    max_iterations: int = 50,
    max_nudges: int = 2,
    first_iteration: int = 1,
) -> LoopOutcome:
    """Run until the model answers in text, a signal stops it, or a limit hits.

    ``history`` is extended in place with everything the turn adds (assistant
    messages, tool results, injected user messages), so the caller saves it.
    ``first_iteration`` > 1 resumes a turn that stopped for an approval: the
    iterations it already used count against ``max_iterations``.
    """
    nudges = 0
    for iteration in range(first_iteration, max_iterations + 1):
        signals = await delegate.check_signals()
        if signals.stop:
            return Stopped(signals.stop)
        history.extend(signals.injected)

        tools = delegate.tools()
        prompt = await delegate.before_llm_call(history)
        completion = await delegate.call_llm(prompt, tools)

        if not completion.tool_calls:
            if nudges < max_nudges and says_tool_intent(completion.text, tools):
                nudges += 1
                history.append(ChatMessage("assistant", completion.text))
                history.append(ChatMessage("user", NUDGE, mid_turn=True))
                # what of it was streamed is kept whole, like the text before a call
                await delegate.keep_streamed(completion)
                await delegate.after_iteration(iteration)
                continue
            history.append(ChatMessage("assistant", completion.text))
            await delegate.handle_text(completion)
            await delegate.after_iteration(iteration)
            return Response(completion.text)

        nudges = 0
        history.append(ChatMessage("assistant", completion.text, tool_calls=completion.tool_calls))
        rnd = await delegate.execute_tool_calls(completion.tool_calls)
        history.extend(rnd.results)
        history.extend(rnd.notes)
        await delegate.after_iteration(iteration)
        if rnd.stop:
            return Stopped(rnd.stop)
        if rnd.approval is not None:
            return rnd.approval
    return MaxIterations(max_iterations)
