"""A turn handed back mid-answer is rerun on its own message alone: a message sent
meanwhile gets an answer below it.

A worker lets a thread go without finishing (SIGTERM past ``SHUTDOWN_GRACE_SECS``;
the same for Redis trouble mid-turn) after the turn had streamed its first reply part.
RELEASE takes its start record back, so the next execution is not a rerun in the
recovery's sense.  What the user saw before: that execution folded the message sent
meanwhile ("B") into the turn and answered both by editing the recorded part 0, a
message *above* B; B got no reply below it (on Telegram an edit does not even
notify).  Now a head with reply parts recorded is answered alone, like any rerun,
and B gets a turn of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from agent_core.events import ThreadKey
from agent_core.ingest import Ingest
from agent_core.llm.base import Completion, CompletionRequest, StreamItem, TextDelta
from agent_core.store.client import RedisClients
from tests.fakes.outbox import RecordingOutbox
from tests.integration.test_delivery import SlowEcho, make_worker, msg, wait_for


class Hangs(SlowEcho):
    """Streams a first piece, then hangs while ``hang`` is set; otherwise answers every
    user message it was given."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.hang = True

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        users = [m.content for m in request.messages if m.role == "user"]
        if self.hang:
            yield TextDelta("working on " + str(users[-1]) + "…")
            await asyncio.Event().wait()
        text = "answer: " + " + ".join(str(u) for u in users)
        yield TextDelta(text)
        yield Completion(text=text, model="x")


async def test_a_turn_handed_back_mid_answer_answers_a_later_message_below_it(
    redis_clients: RedisClients,
) -> None:
    llm = Hangs()
    outbox = RecordingOutbox(stream_interval=0.0)
    t = ThreadKey("web", "local", "handback")
    ingest = Ingest(redis_clients.redis)
    w1 = make_worker(redis_clients, llm, outbox, "w1", shutdown_grace_secs=0.3)
    stop1 = asyncio.Event()
    task1 = asyncio.create_task(w1.run(stop1))
    await ingest.submit(msg(t, 1, "A"))
    await wait_for(lambda: bool(outbox.sends(str(t))))  # part 0 is on screen
    await ingest.submit(msg(t, 2, "B"))  # the person writes again meanwhile
    await asyncio.sleep(0.3)  # B reaches the mailbox (w1 holds the lock: it waits there)
    mark = len(outbox.log)  # everything sent after this is below "B" on screen
    stop1.set()  # a deploy: SIGTERM, and the turn is longer than the grace
    await task1
    llm.hang = False
    w2 = make_worker(redis_clients, llm, outbox, "w2")
    stop2 = asyncio.Event()
    task2 = asyncio.create_task(w2.run(stop2))
    try:
        await wait_for(lambda: any("B" in x for x in outbox.final_texts(str(t))), 10)
        await wait_for(lambda: not w2.running, 10)
    finally:
        stop2.set()
        await task2
    below = [s.message.text for s in outbox.log[mark:] if s.op == "send"]
    # (the fake model answers every user message of the history it is given)
    assert below == ["answer: A + B"], f"B answered above it: {outbox.final_texts(str(t))}"
    assert outbox.final_texts(str(t)) == ["answer: A", "answer: A + B"]
