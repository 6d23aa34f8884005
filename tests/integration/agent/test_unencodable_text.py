"""Text that is not valid Unicode (a lone surrogate) cannot be saved: the session's
JSON (orjson) refuses it.  Text from outside is cleaned where it enters; a session
that cannot be saved all the same fails its turn once (a notice), never a crash of
the thread's task that reruns the message for good."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx

from agent_core.events import Attachment, ThreadKey
from agent_core.llm.base import Completion, CompletionRequest
from agent_core.store import keys
from tests.fakes.pdf import surrogate_pdf
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event
from tests.security.test_ssrf import PUBLIC, dns  # noqa: F401

PDF = surrogate_pdf()


async def test_a_pdf_whose_text_has_a_lone_surrogate_is_answered_once(world: Any) -> None:
    model = FnModel(lambda req: Completion("read it"))
    w = world(model)

    async def fetch_attachment(attachment: Attachment, max_bytes: int) -> bytes:
        return PDF

    w.outbox.fetch_attachment = fetch_attachment  # this outbox can download files
    await w.start()
    t = ThreadKey("telegram", "bot1", "pdf-surrogate")
    doc = Attachment("document", "x.pdf", "application/pdf", len(PDF), "f1")
    await w.send(dataclasses.replace(user_event(t, "read this"), attachments=(doc,)))
    await w.settle(t, timeout=15)
    assert w.texts(t) == ["read it"]
    assert len(model.requests) == 1
    prompt = model.requests[0].messages[-1].content
    assert isinstance(prompt, str) and "\ufffdB\ufffdB" in prompt
    session = await w.session(t)
    assert [m.content for m in session.history][-1] == "read it"


async def test_a_web_page_in_utf7_still_gets_an_answer(
    world: Any,
    dns: dict[str, list[str]],  # noqa: F811
) -> None:
    """A page declaring charset=utf-7 decoded to a lone surrogate: a GET needs no
    approval, so any page the model was pointed at failed the turn."""
    dns["evil.test"] = [PUBLIC]
    model = FnModel(tools_then_answer(("fetch", [call("http_request", url="http://evil.test/")])))
    w = world(model)
    await w.start()
    tool = w.workers[0][0].agent.tools.get("http_request")
    tool._transport, tool._client = (
        httpx.MockTransport(
            lambda req: httpx.Response(
                200,
                headers={"content-type": "text/html; charset=utf-7"},
                content=b"hello +2AA- world",
            )
        ),
        None,
    )
    t = ThreadKey("telegram", "bot1", "utf7")
    await w.send(user_event(t, "fetch"))
    await w.settle(t, timeout=15)
    assert any(x.startswith("done:") for x in w.texts(t)), w.texts(t)
    session = await w.session(t)
    results = [m.content for m in session.history if m.role == "tool"]
    assert len(results) == 1 and results[0].endswith("\n\nhello +2AA- world"), results


async def test_a_session_that_cannot_be_saved_is_done_once_and_said(world: Any) -> None:
    """The model's answer carries a lone surrogate (a provider's JSON may escape one):
    the answer went out, the session cannot be saved.  The message is done (not run
    again), the person is told it will not be remembered, the next one is answered."""

    def rule(req: CompletionRequest) -> Completion:
        text = req.messages[-1].content
        return Completion("odd \ud800 answer" if text == "odd" else f"echo: {text}")

    model = FnModel(rule)
    w = world(model)
    await w.start()
    t = ThreadKey("telegram", "bot1", "unsaveable")
    await w.send(user_event(t, "odd"))
    await w.settle(t, timeout=15)
    assert len(model.requests) == 1  # not rerun
    assert "could not save this part of our conversation" in w.texts(t)[-1]
    await w.send(user_event(t, "fine now"))
    await w.settle(t, timeout=15)
    assert w.texts(t)[-1] == "echo: fine now"
    assert len(model.requests) == 2
    session = await w.session(t)
    assert [m.content for m in session.history] == ["fine now", "echo: fine now"]


async def test_messages_taken_in_by_an_unsaveable_turn_are_not_answered_again(
    world: Any,
) -> None:
    t = ThreadKey("telegram", "bot1", "unsaveable-two")
    holder: dict[str, Any] = {}

    class Model(FnModel):
        async def complete(self, request: CompletionRequest) -> Completion:
            self.requests.append(request)
            last = request.messages[-1]
            if last.role == "user" and last.content == "odd":
                # a second message arrives while the first turn works (a tool round)
                w = holder["w"]
                await w.send(user_event(t, "more"))
                for _ in range(200):
                    if await w.redis.llen(keys.mailbox(t)) >= 2:
                        break
                    await asyncio.sleep(0.02)
                return Completion("", tool_calls=(call("current_time"),))
            if (
                any(m.role == "user" and m.content == "more" for m in request.messages)
                and not any(
                    m.role == "assistant" and "answer" in (m.content or "")
                    for m in request.messages
                )
                and len(self.requests) == 2
            ):
                return Completion("odd \ud800 answer")  # this session cannot be saved
            return Completion(f"echo: {last.content}")

    model = Model(lambda req: Completion("unused"))
    w = world(model)
    holder["w"] = w
    await w.start()
    await w.send(user_event(t, "odd"))
    await w.settle(t, timeout=20)
    second = model.requests[1].messages
    assert any(m.role == "user" and m.content == "more" for m in second), "not injected"
    # 'more' was taken into the failed turn and answered there; it must not run again
    assert len(model.requests) == 2, [r.messages[-1].content for r in model.requests]
