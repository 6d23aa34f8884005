"""The offline demo model: try Parley with no API key at all.

It is a real :class:`LLMProvider` and goes through the same machinery as any
model (bus, worker, loop, streaming, tools, approvals), but its answers are
canned.  The first answer of every conversation says so plainly.

What it does:

* asked for the time -> calls the ``current_time`` tool (when offered), then
  reports the result;
* asked to "demo an approval" / "approval" -> calls the ``demo_approval`` tool
  (harmless, but it needs approval), so a new user sees the Approve / Always /
  Deny buttons without any key;
* "markdown" -> a formatting sample; "long" -> a long answer (splitting);
* anything else -> a short echo with hints.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    ModelInfo,
    StreamItem,
    TextDelta,
    TokenUsage,
    ToolCall,
)

LABEL = (
    "_(Demo model: offline canned answers, no AI connected. "
    "Set `LLM_BACKEND` and a key to talk to a real model — see the README.)_\n\n"
)

MODEL = "parley-demo"


def _last_user(messages: tuple[ChatMessage, ...]) -> str:
    for m in reversed(messages):
        if m.role == "user":
            return m.content
    return ""


def _tool_result_pending(messages: tuple[ChatMessage, ...]) -> ChatMessage | None:
    """The tool result answering the last assistant tool call, if the prompt ends with it."""
    if messages and messages[-1].role == "tool":
        return messages[-1]
    return None


def _has_spoken(messages: tuple[ChatMessage, ...]) -> bool:
    """Has an answer with text been given in this conversation (a step that only
    called a tool is not one: the person saw nothing from the model)?"""
    return any(m.role == "assistant" and m.content.strip() for m in messages)


def _estimate(messages: tuple[ChatMessage, ...], text: str) -> TokenUsage:
    inp = sum(len(m.content.split()) for m in messages) * 13 // 10 + 4 * len(messages)
    out = len(text.split()) * 13 // 10
    return TokenUsage(input=inp, output=out, total=inp + out)


def _call_id(messages: tuple[ChatMessage, ...], name: str) -> str:
    h = hashlib.sha256(f"{len(messages)}:{name}".encode()).hexdigest()[:12]
    return f"demo_{h}"


class DemoProvider:
    """Canned, offline, free. ``delay`` spaces the streamed words (seconds)."""

    def __init__(self, settings: object | None = None, *, delay: float = 0.0) -> None:
        self.delay = delay

    @property
    def name(self) -> str:
        return f"demo:{MODEL}"

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    def model_info(self, model: str | None = None) -> ModelInfo:
        return ModelInfo(name=MODEL, context_window=128_000, supports_tools=True)

    async def list_models(self) -> list[str]:
        return [MODEL]

    def _answer(self, request: CompletionRequest) -> tuple[str, tuple[ToolCall, ...]]:
        """What to say (the label first in a conversation's first answer), or which
        tool to call."""
        text, calls = self._reply(request)
        if text and not _has_spoken(request.messages):
            text = LABEL + text
        return text, calls

    def _reply(self, request: CompletionRequest) -> tuple[str, tuple[ToolCall, ...]]:
        msgs = request.messages
        tool_names = {t.name for t in request.tools}
        pending = _tool_result_pending(msgs)
        if pending is not None:
            if pending.name == "current_time":
                return f"The current time is **{pending.content.strip()}**.", ()
            if pending.name == "demo_approval":
                if "denied" in pending.content.lower():
                    return "Understood: you denied it, so I did not run the demo action.", ()
                return f"Done — the demo action ran. It said: `{pending.content.strip()[:200]}`", ()
            return f"The tool `{pending.name}` returned:\n\n```\n{pending.content[:1500]}\n```", ()

        text = _last_user(msgs).strip()
        low = text.lower()
        if "time" in low and "current_time" in tool_names:
            return "", (
                ToolCall(_call_id(msgs, "current_time"), "current_time", {"timezone": "UTC"}),
            )
        if "approv" in low and "demo_approval" in tool_names:
            args = {"action": "write a harmless note", "note": text[:200]}
            return "", (ToolCall(_call_id(msgs, "demo_approval"), "demo_approval", args),)
        if "markdown" in low:
            body = (
                "Here is some **bold**, some _italic_, `inline code` and a list:\n\n"
                "- one\n- two\n\n```python\nprint('hello from Parley')\n```"
            )
        elif low.startswith("long") or " long " in f" {low} ":
            para = (
                "This is a long demo answer, written to show how Parley splits text that is "
                "longer than a platform allows into several messages, in order, without "
                "breaking words or code blocks."
            )
            body = "\n\n".join(f"{i}. {para}" for i in range(1, 41))
        elif low in ("hi", "hello", "hey", "hallo") or low.startswith(("hi ", "hello ")):
            body = "Hello! I'm the demo model. Try: *what time is it?*, *demo an approval*, *markdown*."
        elif not text:
            body = "I received your message, but it had no text I could read."
        else:
            quoted = text if len(text) <= 300 else text[:300] + "…"
            body = (
                f"You said: {quoted}\n\n"
                "I'm the offline demo model, so I can't really think. Try *what time is it?*, "
                "*demo an approval*, *markdown* or *long*."
            )
        return body, ()

    async def complete(self, request: CompletionRequest) -> Completion:
        text, calls = self._answer(request)
        return Completion(
            text=text,
            tool_calls=calls,
            usage=_estimate(request.messages, text),
            model=MODEL,
            finish_reason="tool_calls" if calls else "stop",
            provider="demo",
        )

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        final = await self.complete(request)
        if final.text:
            words = final.text.split(" ")
            for i, w in enumerate(words):
                if self.delay:
                    await asyncio.sleep(self.delay)
                yield TextDelta(w if i == 0 else " " + w)
        yield final
