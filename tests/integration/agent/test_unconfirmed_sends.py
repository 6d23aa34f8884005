"""A send that timed out after leaving (SendUnconfirmed) is never repeated, and a
streamed answer whose preview is unconfirmed still reaches the user whole, once."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.errors import SendUnconfirmed
from agent_core.events import MessageRef, OutboundMessage, ThreadKey
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from tests.fakes.outbox import RecordingOutbox

THREAD = ThreadKey("web", "local", "c1")


@dataclass
class TimingOutOutbox(RecordingOutbox):
    """Stores the message (the user sees it) but the answer never comes back."""

    time_out_sends: set[int] = field(default_factory=set)  # 0-based send numbers
    _n: int = 0

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        n, self._n = self._n, self._n + 1
        ref = await super().send(thread, message, reply_to=reply_to)
        if n in self.time_out_sends:
            raise SendUnconfirmed("no answer in time")
        return ref


def _writer(outbox: RecordingOutbox, clients: RedisClients, event: str = "e1") -> ReplyWriter:
    delivery = Delivery(clients.redis, clients.blocking)
    return ReplyWriter(outbox, delivery, THREAD, event, {}, LockGuard())


async def test_partial_preview_unconfirmed_final_answer_sent_once(
    redis_clients: RedisClients,
) -> None:
    outbox = TimingOutOutbox(stream_interval=0.0, time_out_sends={0})
    stream = _writer(outbox, redis_clients).stream()
    await stream.feed("Hello")
    await stream.feed(", world")  # cannot edit the unconfirmed preview: skipped
    await stream.finish()
    assert [s.op for s in outbox.log] == ["send", "send"]
    assert outbox.final_texts() == ["Hello", "Hello, world"]


async def test_whole_answer_in_unconfirmed_preview_not_repeated(
    redis_clients: RedisClients,
) -> None:
    outbox = TimingOutOutbox(stream_interval=0.0, time_out_sends={0})
    stream = _writer(outbox, redis_clients).stream()
    await stream.feed("All of it")
    await stream.finish()
    assert outbox.final_texts() == ["All of it"]


async def test_unconfirmed_final_send_recorded_and_not_repeated_on_rerun(
    redis_clients: RedisClients,
) -> None:
    outbox = TimingOutOutbox(time_out_sends={0})
    writer = _writer(outbox, redis_clients)
    ref = await writer.say(OutboundMessage("the answer"))
    assert ref.message_id == ""
    # The turn runs again (crash after the send): the recorded part is not resent.
    delivery = Delivery(redis_clients.redis, redis_clients.blocking)
    recorded = await delivery.sent_ref(THREAD, "e1:0")
    assert isinstance(recorded, MessageRef)
    rerun = ReplyWriter(outbox, delivery, THREAD, "e1", {"e1:0": recorded}, LockGuard())
    await rerun.say(OutboundMessage("the answer"))
    assert outbox.final_texts() == ["the answer"]
    assert [s.op for s in outbox.log] == ["send"]
