"""A turn asked for approval, its worker died before saving that it waits, and the
rerun asked again: a new approval, its prompt sent as the same reply part (an edit
of the same message).  The first approval was never to be decided, yet it stayed
in the expiry timer pointing at that message: when it expired it rewrote the prompt
the person had meanwhile approved to "Expired — not run".  And a prompt whose turn
failed after asking kept live-looking buttons that every press refused."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from agent_core.agent import approvals as ap
from agent_core.events import ThreadKey
from agent_core.llm.base import Completion, CompletionRequest, TokenUsage, ToolCall
from agent_core.proactive.approval_expiry import expiry_event
from tests.integration.agent.approval_helpers import approval_id, press
from tests.integration.agent.conftest import FnModel, user_event
from tests.integration.agent.crash import die_before_completion, replace_worker
from tests.integration.agent.test_approval_binding import model
from tests.integration.test_delivery import wait_for


def _shown(w: Any) -> str:
    """The approval whose buttons the latest prompt (sent or edited) carries."""
    with_buttons = [s for s in w.outbox.log if s.message.buttons]
    return with_buttons[-1].message.buttons[0].payload.split(":")[1] if with_buttons else ""


def _prompt_texts(w: Any, message_id: str) -> list[str]:
    return [s.message.text for s in w.outbox.log if s.message_id == message_id and s.op != "action"]


async def test_an_earlier_executions_approval_never_rewrites_the_prompt(world: Any) -> None:
    w = world(model({"count it": [("counter", {"label": "x"})]}), scheduler_enabled=True)
    await w.start()
    asked = die_before_completion(w)  # like a SIGKILL before it saves the wait
    t = ThreadKey("telegram", "bot1", "asked-again")
    await w.send(user_event(t, "count it", eid="q1"))
    await asyncio.wait_for(asked.wait(), 10)
    first = approval_id(w, t)
    await replace_worker(w)  # it reruns the turn once the lock expires
    await wait_for(lambda: _shown(w) not in ("", first), 15)
    await w.settle(t)
    second = _shown(w)
    prompt = w.prompts(t)[-1].message_id
    assert [s.op for s in w.outbox.log if s.message_id == prompt] == ["send", "edit"]
    await w.send(press(t, f"ap:{second}:a"))
    await w.settle(t)
    assert await w.counter("x") == 1
    assert "Approved" in _prompt_texts(w, prompt)[-1]
    await w.send(expiry_event(t, first))  # the first approval's time runs out
    await w.settle(t)
    final = _prompt_texts(w, prompt)[-1]
    assert "Approved" in final and "Expired" not in final, final


async def test_a_prompt_whose_turn_failed_after_asking_loses_its_buttons_on_a_press(
    world: Any, monkeypatch: Any
) -> None:
    real = ap.ApprovalStore.arrivals
    failed = {"n": 0}

    async def flaky(self: Any, thread: Any) -> int:  # the turn fails right after asking
        if not failed["n"]:
            failed["n"] += 1
            raise ConnectionError("Redis went away right after the prompt was sent")
        return await real(self, thread)

    monkeypatch.setattr(ap.ApprovalStore, "arrivals", flaky)
    w = world(model({"count it": [("counter", {"label": "x"})]}))
    await w.start()
    t = ThreadKey("telegram", "bot1", "failed-after-asking")
    await w.send(user_event(t, "count it"))
    await w.settle(t)
    prompt = w.prompts(t)[-1].message_id
    await w.send(press(t, f"ap:{approval_id(w, t)}:a"))
    await w.settle(t)
    assert w.private_notes()[-1] == "That approval is not active any more."
    assert "Cancelled" in _prompt_texts(w, prompt)[-1]
    assert await w.counter("x") == 0


async def test_an_earlier_approval_never_rewrites_the_text_a_rerun_put_in_its_place(
    world: Any,
) -> None:
    """The rerun's model streamed a line before asking: the line went into the part
    the first prompt had been (an edit of that message), the new prompt into the next
    part; the first approval's expiry edited the line to "Expired — not run"."""
    asks = {"n": 0}
    calls = itertools.count()

    def rule(req: CompletionRequest) -> Completion:
        m = req.messages[-1]
        if m.role == "tool":
            return Completion("done", usage=TokenUsage(10, 5))
        text = "Let me count that for you." if asks["n"] else ""
        return Completion(
            text, tool_calls=(ToolCall(f"c{next(calls)}", "counter", {"label": "x"}),)
        )

    w = world(FnModel(rule), scheduler_enabled=True)
    w.outbox.stream_interval = 0.0  # a streaming channel (Telegram, Slack, Discord)
    await w.start()
    asked = die_before_completion(w)  # like a SIGKILL before it saves the wait
    t = ThreadKey("telegram", "bot1", "text-first-rerun")
    await w.send(user_event(t, "count it", eid="q1"))
    await asyncio.wait_for(asked.wait(), 10)
    first = approval_id(w, t)
    first_msg = [s for s in w.outbox.log if s.message.buttons][-1].message_id
    asks["n"] = 1  # the rerun's model streams a line before asking
    await replace_worker(w)
    await wait_for(lambda: _shown(w) not in ("", first), 15)
    await w.settle(t)
    texts = [s.message.text for s in w.outbox.log if s.message_id == first_msg and s.op != "action"]
    assert texts[-1] == "Let me count that for you.", texts
    await w.send(expiry_event(t, first))
    await w.settle(t)
    texts = [s.message.text for s in w.outbox.log if s.message_id == first_msg and s.op != "action"]
    assert "Expired" not in texts[-1], texts
