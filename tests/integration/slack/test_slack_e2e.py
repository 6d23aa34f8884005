"""End to end: a real Runtime (worker + web + gateway, demo model) against the fake Slack."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx

import channels.slack
from agent_core.llm.base import Completion, TextDelta, ToolCall
from agent_core.llm.demo import DemoProvider
from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from bots.settings import Settings
from channels.slack.settings import SlackSettings
from channels.web.channel import WebSettings
from tests.fakes.llm_servers import ScriptedProvider
from tests.fakes.slack import FakeSlack
from tests.integration.slack.conftest import make_settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_for(cond: Any, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.05)


def _demo_settings(valkey: EmbeddedValkey, slack_settings: SlackSettings) -> Settings:
    """A whole Parley on Slack with the demo model, DMs open to anyone."""
    return Settings(
        core=CoreSettings(redis_url=valkey.url, sweep_interval_secs=0.2, dm_policy="open"),  # type: ignore[arg-type]
        llm=LLMSettings(llm_backend="demo"),
        web=WebSettings(web_chat_enabled=False),
        platforms={"slack": slack_settings},
        modules={"slack": channels.slack},
    )


async def test_dm_over_http_and_mention_over_socket_are_answered_once(
    valkey: EmbeddedValkey, redis: Any, fake_slack: FakeSlack, slack_settings: SlackSettings
) -> None:
    settings = _demo_settings(valkey, slack_settings)
    # the demo streams a word every 0.1 s, so the turn outlasts TYPING_DELAY and the
    # working reaction is shown (and taken off again)
    async with Runtime(settings, "all", llm=DemoProvider(delay=0.1)) as rt:
        stop = asyncio.Event()
        port = free_port()
        task = asyncio.create_task(rt.serve(stop, host="127.0.0.1", port=port))
        try:
            base = f"http://127.0.0.1:{port}"
            await _wait_for(lambda: fake_slack.open_sockets > 0)
            # a DM over the Events API, delivered twice (Slack retry)
            dm = fake_slack.message("D1", "hello there")
            for retry in (None, 1):
                for _ in range(50):
                    try:
                        resp = await fake_slack.deliver(base, dm, retry_num=retry)
                        break
                    except httpx.ConnectError:
                        await asyncio.sleep(0.05)
                assert resp.status_code == 200
            await _wait_for(lambda: any(m.user == "UBOT" for m in fake_slack.thread("D1")))
            # a mention over Socket Mode: answered in its thread
            mention = fake_slack.message("C1", "<@UBOT> hi", kind="app_mention")
            await fake_slack.wait_ack(await fake_slack.push("events_api", mention))
            root = mention["event"]["ts"]
            await _wait_for(lambda: len(fake_slack.thread("C1", root)) >= 1)
            await asyncio.sleep(0.5)  # room for a (wrong) second answer
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    dm_answers = [m for m in fake_slack.thread("D1") if m.user == "UBOT"]
    assert len(dm_answers) == 1 and dm_answers[0].text.strip()
    assert "parley pairing approve" not in dm_answers[0].text  # the agent's answer itself
    thread_answers = [m for m in fake_slack.thread("C1", root) if m.user == "UBOT"]
    assert len(thread_answers) == 1
    # the working reaction was put on and taken off again
    assert fake_slack.calls_to("reactions.add") and fake_slack.calls_to("reactions.remove")


async def test_final_edit_rate_limited_twice_is_waited_out(
    valkey: EmbeddedValkey, redis: Any, fake_slack: FakeSlack
) -> None:
    """chat.update is ~50 a minute per workspace, shared by every conversation: a
    429 on the final edit, twice in a row, must not lose the answer.  The edit
    waits each Retry-After out and goes through; the preview is
    not left standing and no "skipped" notice is sent."""
    final = "The first words and the rest of the answer."
    model = ScriptedProvider(
        "scripted:model", [TextDelta("The first words"), TextDelta(final[15:]), Completion(final)]
    )
    settings = Settings(
        core=CoreSettings(redis_url=valkey.url, sweep_interval_secs=0.2, dm_policy="open"),  # type: ignore[arg-type]
        llm=LLMSettings(llm_backend="demo"),
        web=WebSettings(web_chat_enabled=False),
        # no streamed edit in between: the only chat.update is the final one
        platforms={"slack": make_settings(fake_slack, slack_stream_interval=600.0)},
        modules={"slack": channels.slack},
    )
    fake_slack.rate_limit("chat.update", times=2, retry_after=1)
    async with Runtime(settings, "all", llm=model) as rt:
        stop = asyncio.Event()
        port = free_port()
        task = asyncio.create_task(rt.serve(stop, host="127.0.0.1", port=port))
        try:
            dm = fake_slack.message("D1", "hello")
            for _ in range(100):
                try:
                    await fake_slack.deliver(f"http://127.0.0.1:{port}", dm)
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            # the final edit went through, or a second message (a notice) came
            await _wait_for(
                lambda: (
                    fake_slack.calls_to("chat.update")
                    or len(fake_slack.calls_to("chat.postMessage")) > 1
                ),
                within=20,
            )
            await asyncio.sleep(0.5)  # room for a (wrong) notice
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    answers = [m.text for m in fake_slack.thread("D1") if m.user == "UBOT"]
    assert answers == [final]
    assert [c.status for c in fake_slack.calls_to("chat.update", ok=None)] == [429, 429, 200]


class _WaitsForSecondMessage(ScriptedProvider):
    """First step: waits until ``ready()`` (the second message is in and got the
    working reaction), then calls a tool, so the second message is merged into
    the running turn.  Second step: answers with what it read."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        super().__init__("scripted:model")
        self.ready = ready

    async def stream(self, request: Any) -> Any:
        self.calls.append(request)
        if len(self.calls) == 1:
            await _wait_for(self.ready, within=20)
            yield Completion("", tool_calls=(ToolCall("c1", "current_time", {}),))
            return
        users = [m.content for m in request.messages if m.role == "user"]
        yield Completion(f"I read: {users}")


async def test_a_message_merged_into_a_running_turn_loses_its_reaction_too(
    valkey: EmbeddedValkey, redis: Any, fake_slack: FakeSlack, slack_settings: SlackSettings
) -> None:
    """The working reaction goes on the thread's newest message, so a message
    merged into a running turn gets it; the turn's end takes it off that one too."""
    second: dict[str, Any] = {}

    def second_has_eyes() -> bool:
        msg = second.get("msg")
        return msg is not None and "eyes" in msg.reactions

    model = _WaitsForSecondMessage(second_has_eyes)
    settings = _demo_settings(valkey, slack_settings)
    async with Runtime(settings, "all", llm=model) as rt:
        stop = asyncio.Event()
        port = free_port()
        task = asyncio.create_task(rt.serve(stop, host="127.0.0.1", port=port))
        try:
            base = f"http://127.0.0.1:{port}"
            a = fake_slack.message("D1", "what time is it")
            for _ in range(100):
                try:
                    await fake_slack.deliver(base, a)
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            a_msg = fake_slack.messages[("D1", a["event"]["ts"])]
            await _wait_for(lambda: "eyes" in a_msg.reactions)
            b = fake_slack.message("D1", "in UTC please")
            second["msg"] = fake_slack.messages[("D1", b["event"]["ts"])]
            await fake_slack.deliver(base, b)
            await _wait_for(lambda: any(m.user == "UBOT" for m in fake_slack.thread("D1")), 30)
            # the turn's end takes off what it put on, from both messages
            await _wait_for(lambda: not a_msg.reactions and not second["msg"].reactions)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    answer = [m.text for m in fake_slack.thread("D1") if m.user == "UBOT"]
    assert answer == ["I read: ['what time is it', 'in UTC please']"]  # one turn, merged
    assert a_msg.reactions == set()
    assert second["msg"].reactions == set()
