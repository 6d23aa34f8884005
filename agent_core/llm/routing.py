"""Smart routing: easy questions to a cheap model, hard ones to the primary.

Classification of the last user message:

* **Simple**: at most 10 characters; or (without a Complex marker) at most 200
  characters, or starting with a greeting / status / yes / no / list / show /
  help word;
* **Complex**: a code block, one of implement / refactor / analyze / debug /
  design / architecture / optimize, or at least 1000 characters;
* **Moderate**: everything else.

Simple goes to the cheap model; Complex and every request with tools go to the
primary.  Moderate goes to the cheap model and, with cascade on, is escalated
to the primary when the answer is empty or uncertain ("I'm not sure" ...).
Streaming holds back the first :data:`HOLD_CHARS` characters of a Moderate
answer to judge it before the user sees any.  An escalated answer's usage is
both calls' (the cheap one estimated when its stream was cut before its usage
arrived), so budgets count what was paid.  Off (a pass-through) when no
cheap model is set; :meth:`SmartRouting.cheap` still answers, with the primary.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from enum import Enum

from agent_core.llm.base import (
    Completion,
    CompletionRequest,
    LLMProvider,
    ModelInfo,
    StreamItem,
    TextDelta,
    TokenUsage,
)
from agent_core.llm.retry import is_retryable
from agent_core.llm.wrapper import Wrapper, aclose

log = logging.getLogger(__name__)


class Complexity(Enum):
    SIMPLE = "simple"
    MODERATE = "moderate"
    COMPLEX = "complex"


SIMPLE_WORDS = frozenset(
    [
        "hi",
        "hello",
        "hey",
        "thanks",
        "thank",
        "ok",
        "okay",
        "yes",
        "no",
        "yep",
        "nope",
        "sure",
        "status",
        "list",
        "show",
        "help",
        "good",
        "morning",
        "evening",
    ]
)
COMPLEX_WORDS = re.compile(
    r"\b(implement|refactor|analy[sz]e|debug|design|architecture|optimi[sz]e)", re.IGNORECASE
)
UNCERTAIN = (
    "i'm not sure",
    "i am not sure",
    "i don't know",
    "i do not know",
    "i'm unable to",
    "i am unable to",
    "i cannot",
    "i can't",
    "beyond my capabilities",
    "i need more context",
)
HOLD_CHARS = 200


def classify(text: str) -> Complexity:
    t = text.strip()
    if len(t) <= 10:
        return Complexity.SIMPLE
    if "```" in t or COMPLEX_WORDS.search(t) or len(t) >= 1000:
        return Complexity.COMPLEX
    first = re.split(r"[\s,.!?:;]+", t.lower(), maxsplit=1)[0]
    if len(t) <= 200 or first in SIMPLE_WORDS:
        return Complexity.SIMPLE
    return Complexity.MODERATE


def is_uncertain(answer: str) -> bool:
    low = answer.strip().lower().replace("’", "'")
    return not low or any(p in low for p in UNCERTAIN)


def estimate_usage(request: CompletionRequest, answer: str) -> TokenUsage:
    """Rough usage (4 characters a token) of a call cut before its usage arrived."""
    prompt = sum(len(m.content) for m in request.messages) // 4 + 1
    output = len(answer) // 4 + 1
    return TokenUsage(input=prompt, output=output, total=prompt + output)


def _last_user_text(request: CompletionRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user":
            return m.content
    return ""


class Pinned(Wrapper):
    """Every request to one model (unless the request names its own)."""

    def __init__(self, inner: LLMProvider, model: str) -> None:
        super().__init__(inner)
        self.model = model

    @property
    def name(self) -> str:
        return f"{self.inner.name.rsplit(':', 1)[0]}:{self.model}"

    def model_info(self, model: str | None = None) -> ModelInfo:
        return self.inner.model_info(model or self.model)

    def _pin(self, request: CompletionRequest) -> CompletionRequest:
        return request if request.model else replace(request, model=self.model)

    async def complete(self, request: CompletionRequest) -> Completion:
        return await self.inner.complete(self._pin(request))

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        it = self.inner.stream(self._pin(request))
        try:
            async for item in it:
                yield item
        finally:
            await aclose(it)


class SmartRouting(Wrapper):
    def __init__(self, inner: LLMProvider, cheap_model: str = "", cascade: bool = True) -> None:
        super().__init__(inner)
        self.cheap_model = cheap_model
        self.cascade = cascade
        self._cheap: LLMProvider = Pinned(inner, cheap_model) if cheap_model else inner
        self.total = 0
        self.cheap_count = 0
        self.primary = 0
        self.escalations = 0

    # ``cheap`` is the accessor; the counter of cheap-routed requests is ``cheap_count``
    def cheap(self) -> LLMProvider:
        """A provider for light work (summaries): the cheap model, else the primary."""
        return self._cheap

    def route(self, request: CompletionRequest) -> Complexity | None:
        """The class of ``request``, or None when it must go to the primary."""
        if not self.cheap_model or request.model or request.tools:
            return None
        kind = classify(_last_user_text(request))
        return None if kind is Complexity.COMPLEX else kind

    async def complete(self, request: CompletionRequest) -> Completion:
        self.total += 1
        kind = self.route(request)
        if kind is None:
            self.primary += 1
            return await self.inner.complete(request)
        self.cheap_count += 1
        answer = await self._cheap.complete(request)
        if kind is Complexity.MODERATE and self.cascade and is_uncertain(answer.text):
            self.escalations += 1
            log.info("cheap model unsure; escalating to %s", self.inner.name)
            final = await self.inner.complete(request)
            # both calls were paid for: budgets and session usage count both
            return replace(final, usage=answer.usage + final.usage)
        return answer

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        self.total += 1
        kind = self.route(request)
        if kind is None:
            self.primary += 1
            target = self.inner
        else:
            self.cheap_count += 1
            target = self._cheap
        judge = kind is Complexity.MODERATE and self.cascade
        held: list[str] = []
        escalate = False
        yielded = False
        paid = TokenUsage()  # the cheap call's usage when it is escalated
        # A stream cut while its text was all held back here was seen by nobody,
        # but the retry layer below saw text and would not ask again: ask once more.
        restarts = 1
        while True:
            it = target.stream(request)
            try:
                async for item in it:
                    if not judge:
                        yielded = True
                        yield item
                        continue
                    if isinstance(item, TextDelta):
                        held.append(item.text)
                        so_far = "".join(held)
                        if len(so_far) >= HOLD_CHARS:
                            if is_uncertain(so_far):
                                escalate = True
                                # cut before its usage arrived: count an estimate
                                paid = estimate_usage(request, so_far)
                                break
                            judge = False
                            yielded = True
                            yield TextDelta(so_far)
                        continue
                    if is_uncertain(item.text):
                        escalate = True
                        paid = item.usage
                        break
                    yielded = True
                    if held:
                        yield TextDelta("".join(held))
                    yield item
                break
            except Exception as exc:
                if yielded or not held or restarts == 0 or not is_retryable(exc):
                    raise
                restarts -= 1
                held.clear()
                log.warning("stream cut while its text was held back (%s); asking again", exc)
            finally:
                await aclose(it)
        if escalate:
            self.escalations += 1
            log.info("cheap model unsure; escalating to %s", self.inner.name)
            it = self.inner.stream(request)
            try:
                async for item in it:
                    if isinstance(item, Completion):
                        item = replace(item, usage=paid + item.usage)
                    yield item
            finally:
                await aclose(it)
