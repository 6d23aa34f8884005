"""Compaction and trimming cut only where a person's message opened a turn.

What the user saw: in a long tool turn where the model had been nudged ("You
said you would use a tool but did not call one…"), compaction counted the
nudges as turn starts, cut inside the current turn and dropped the person's
request (without a summary): the model carried on from its own nudge as if it
were the request.  Trimming to MAX_HISTORY_MESSAGES picked its cut the same way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent_core.agent.context import Compactor, request_messages, turn_starts
from agent_core.agent.loop import NUDGE
from agent_core.agent.session import Session
from agent_core.agent.tokens import estimate
from agent_core.events import ThreadKey
from agent_core.llm.base import ChatMessage, Completion, CompletionRequest, ToolCall
from tests.integration.agent.conftest import FnModel, user_event

REQUEST = "Compare the Q3 invoices of ACME (id 7731) with the contract terms"


def _history(*, marked: bool) -> list[ChatMessage]:
    """An old long turn, then the current one: the request, then nudges and tool
    rounds (``marked``: as the loop stores them now; else as stored before, known
    by the nudge's text) and a message the person sent meanwhile."""
    h = [ChatMessage("user", "old question " + "word " * 6000), ChatMessage("assistant", "old")]
    h.append(ChatMessage("user", REQUEST))
    for i in range(3):
        h.append(ChatMessage("assistant", "Let me check the invoices."))
        h.append(ChatMessage("user", NUDGE, mid_turn=marked))
        call = ToolCall(f"c{i}", "http_request", {"url": f"https://x/{i}"})
        h.append(ChatMessage("assistant", "", tool_calls=(call,)))
        h.append(
            ChatMessage("tool", "invoice data " * 50, tool_call_id=call.id, name="http_request")
        )
    if marked:
        h.append(ChatMessage("user", "also check Q2 please", mid_turn=True))
    return h


async def _archive(s: Session, msgs: list[ChatMessage]) -> None: ...


@pytest.mark.parametrize("marked", [True, False])
async def test_truncation_keeps_the_current_request(marked: bool) -> None:
    comp = Compactor(lambda: FnModel(lambda r: Completion("summary")), _archive)
    h = _history(marked=marked)
    s = Session("web:local:nudge", history=h)
    res = await comp.compact(s, h, int(estimate(h) / 0.97))  # > 95 %: the truncate level
    assert res is not None and res.strategy == "truncated"
    sent = request_messages(h)
    assert sent[0].content == REQUEST  # the old turn went, the current one is whole
    assert sum(m.content == NUDGE for m in sent) == 3


def test_trim_never_cuts_at_a_nudge() -> None:
    h = _history(marked=True)
    s = Session("web:local:trim", history=list(h))
    dropped = s.trim(10)  # the cut lands inside the current turn: back to its request
    assert s.history[0].content == REQUEST
    assert dropped == h[:2]


def test_only_the_peoples_turn_openers_are_turn_starts() -> None:
    h = _history(marked=True)
    assert turn_starts(h) == [0, 2]
    assert turn_starts(_history(marked=False)) == [0, 2]


def test_the_mark_survives_the_session_store() -> None:
    h = _history(marked=True)
    back = Session.from_json(Session("web:local:rt", history=h).to_json()).history
    assert back == [replace(m, images=()) for m in h]
    assert turn_starts(back) == [0, 2]


async def test_the_loop_stores_its_nudge_as_no_turn_start(world: Any) -> None:
    def rule(req: CompletionRequest) -> Completion:
        if req.messages[-1].content == NUDGE:
            return Completion("the answer")
        return Completion("Let me check that.")

    t = ThreadKey("web", "local", "nudged")
    w = world(FnModel(rule))
    await w.start()
    await w.send(user_event(t, REQUEST))
    await w.settle(t)
    h = (await w.session(t)).history
    assert [m.content for m in h if m.role == "user"] == [REQUEST, NUDGE]
    assert turn_starts(h) == [0]
