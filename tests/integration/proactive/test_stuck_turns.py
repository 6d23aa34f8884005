"""Stuck turns: the turn timeout, and the reset of a turn whose worker died (SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent_core.events import MessageRef, ThreadKey
from agent_core.store import keys
from tests.fakes.llm_servers import FakeLLMServer, openai_stream
from tests.integration.agent.conftest import FnModel, Rule, user_event

ROOT = Path(__file__).resolve().parents[3]
T = ThreadKey("web", "local", "stuck1")


def echo() -> Rule:
    from agent_core.llm.base import Completion

    return lambda req: Completion("echo: " + req.messages[-1].content)


async def test_a_turn_over_the_timeout_is_stopped_and_the_lock_released(pworld: Any) -> None:
    model = FnModel(echo(), delay=5.0)
    w = pworld(model, turn_timeout_secs=0.5)
    await w.start()
    started = time.monotonic()
    await w.send(user_event(T, "a slow one"))
    await w.settle(T, 5)
    assert time.monotonic() - started < 3
    texts = w.texts(T)
    assert any("took longer than 0.5 seconds" in t for t in texts), texts
    assert await w.redis.exists(keys.lock(T)) == 0
    model.delay = 0
    await w.send(user_event(T, "quick"))
    await w.settle(T)
    assert w.texts(T)[-1] == "echo: quick"
    s = await w.session(T)
    assert [m.content for m in s.history] == ["quick", "echo: quick"]  # history stays valid


async def _seed_part(w: Any, thread: ThreadKey, field: str) -> None:
    ref = MessageRef("web", str(thread), "m-old")
    await w.redis.hset(keys.sent(thread), field, orjson.dumps(ref.to_dict()))


async def _seed_start(w: Any, thread: ThreadKey, event_id: str, owner: str = "dead") -> None:
    """What a worker that began a turn on ``event_id`` and died left behind."""
    ref = MessageRef("", "", f"started:{owner}")
    await w.redis.hset(keys.sent(thread), f"{event_id}#s:0", orjson.dumps(ref.to_dict()))


def _worker_env(valkey: Any, llm: FakeLLMServer) -> dict[str, str]:
    """A worker process on the test's Valkey and fake LLM, quick to notice a dead peer."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET"))}
    env.update(
        PARLEY_ENV_FILE=os.devnull,
        REDIS_URL=valkey.url,
        LLM_BACKEND="openai_compatible",
        LLM_BASE_URL=llm.openai_url,
        LLM_MODEL="fake",
        LLM_MAX_RETRIES="0",
        DM_POLICY="open",
        LOCK_TTL_SECS="1",
        RECLAIM_IDLE_SECS="1",
        SWEEP_INTERVAL_SECS="0.5",
        SCHEDULER_ENABLED="false",
        LOG_LEVEL="WARNING",
    )
    return env


async def _recorded(w: Any, part: str) -> bool:
    """Is ``part`` recorded as sent (not only claimed)?"""
    raw = await w.redis.hget(keys.sent(T), part)
    return raw is not None and not raw.startswith(b"pending:")


async def test_interrupted_turn_is_rerun_twice_then_dropped(pworld: Any) -> None:
    w = pworld(FnModel(echo()))
    # a turn on e-int1 sent a part, then its worker died (its records are still there)
    await w.send(user_event(T, "first try", eid="e-int1"))
    await _seed_start(w, T, "e-int1")
    await _seed_part(w, T, "e-int1:0")
    await w.start()
    await w.settle(T)
    texts = w.texts(T)
    assert texts == ["echo: first try"]  # rerun: the recorded part becomes the answer
    assert [s.op for s in w.outbox.log if s.op != "action"] == ["edit"]  # never sent twice
    assert await w.redis.hlen(keys.sent(T)) == 0  # completion removed every record

    # its rerun alongside others was interrupted too: once more, alone
    await w.stop()
    w.outbox.log.clear()
    await w.send(user_event(T, "unlucky", eid="e-int2"))
    await _seed_start(w, T, "e-int2", "dead-rerun")
    await _seed_part(w, T, "e-int2#r:c")
    await w.start()
    await w.settle(T)
    assert w.texts(T)[-1] == "echo: unlucky"
    assert await w.redis.hlen(keys.sent(T)) == 0  # both retry records went with it

    # the rerun alone was interrupted too: drop and reset
    await w.stop()
    w.outbox.log.clear()
    await w.send(user_event(T, "poison", eid="e-int3"))
    await _seed_start(w, T, "e-int3", "dead-rerun-alone")
    await _seed_part(w, T, "e-int3:0")
    await _seed_part(w, T, "e-int3#r:c")
    await _seed_part(w, T, "e-int3#r:0")
    await w.start()
    await w.settle(T)
    texts = w.texts(T)
    assert any("gave up on that message" in t for t in texts), texts
    assert not any("poison" in t for t in texts)
    await w.send(user_event(T, "hello again"))
    await w.settle(T)
    assert w.texts(T)[-1] == "echo: hello again"


async def test_worker_sigkilled_mid_turn_is_recovered_by_another(
    pworld: Any, valkey: Any, tmp_path: Path
) -> None:
    """A real worker process streams the first words of an answer, is SIGKILLed; another
    worker takes the thread over, tells the user and answers."""
    llm = FakeLLMServer()

    def hang_after_first_words(path: str, body: Any) -> Any:
        r = openai_stream(["Working on it", " …"], event_delay=4)
        assert r.events is not None
        r.events = r.events[1:]  # the first frame carries text; then a 4 s pause
        return r

    llm.responder = hang_after_first_words
    await llm.start()
    env = _worker_env(valkey, llm)
    log = (tmp_path / "worker.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bots.cli", "run", "worker", env=env, cwd=ROOT, stdout=log, stderr=log
    )
    w = pworld(FnModel(echo()), lock_ttl_secs=1.0)
    try:
        await w.send(user_event(T, "do the long thing", eid="e-kill"))
        # killed once the first words are shown and recorded: a part still only
        # claimed (on the wire) is waited for by the rerun, then never sent again
        # (the test after this one)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not await _recorded(w, "e-kill:0"):
            await asyncio.sleep(0.05)
        assert await _recorded(w, "e-kill:0"), "the worker never showed its first words"
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        await w.start()  # another worker
        await w.settle(T, 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await llm.stop()
    # recovered: the streamed part is edited into the answer (no second message); a
    # second death on the same message would drop it and tell the user (test above)
    texts = w.texts(T)
    assert texts == ["echo: do the long thing"], texts
    assert not w.outbox.sends(str(T))
    assert await w.redis.exists(keys.lock(T)) == 0
    assert await w.redis.llen(keys.mailbox(T)) == 0


@pytest.mark.parametrize("wire_hook", [True, False], ids=["claim-on-the-wire", "claim-first"])
async def test_a_rerun_with_a_part_on_the_wire_leaves_later_messages_their_own_turns(
    pworld: Any, monkeypatch: Any, wire_hook: bool, caplog: Any
) -> None:
    """The worker running e-w1 died with its reply part on the wire (claimed, never
    recorded).  The rerun does not send that part again, so it must not fold the
    messages that arrived meanwhile into it: they are answered in turns of their own
    (found by the three-worker SIGKILL test: a chat's nine later messages were
    answered inside the suppressed part, i.e. never)."""
    from agent_core.agent.reply import ReplyWriter
    from agent_core.llm.base import Completion
    from agent_core.outbox import on_wire

    wait = ReplyWriter._wait_for_part
    waits: list[str] = []

    async def short_wait(self: Any, field: str) -> Any:
        waits.append(field)
        self.part_wait_secs = 0.3
        return await wait(self, field)

    monkeypatch.setattr(ReplyWriter, "_wait_for_part", short_wait)

    def echo_since_last_answer(req: Any) -> Completion:
        said: list[str] = []
        for m in req.messages:
            said = [] if m.role == "assistant" else [*said, m.content] if m.role == "user" else said
        return Completion("echo: " + " + ".join(said))

    w = pworld(FnModel(echo_since_last_answer))

    class WireOutbox(type(w.outbox)):  # type: ignore[misc]
        wire_hook = True  # like Telegram and Discord: the claim happens on the wire

        async def send(self, thread: Any, message: Any, *, reply_to: Any = None) -> Any:
            await on_wire()
            return await super().send(thread, message, reply_to=reply_to)

    if wire_hook:  # Telegram, Discord; without it (Slack) the writer claims first
        w.outbox.__class__ = WireOutbox
    await w.send(user_event(T, "first", eid="e-w1"))
    await w.send(user_event(T, "second", eid="e-w2"))
    await w.send(user_event(T, "third", eid="e-w3"))
    await w.redis.hset(keys.sent(T), "e-w1:0", b"pending:1")  # claimed by the dead worker
    await w.start()
    await w.settle(T, 15)
    shown = " | ".join(w.texts(T))
    assert "second" in shown and "third" in shown, shown
    assert "first" not in shown  # never twice: it may have reached the user
    assert "turn failed" not in caplog.text  # an expected situation, not an error
    assert waits == ["e-w1:0"]  # waited for the dead worker's record once, not twice


async def test_a_turn_records_who_began_it_and_a_shutdown_takes_the_record_back(
    pworld: Any,
) -> None:
    """Every turn leaves a start record while it runs (no round trip of its own: the
    script that begins the turn writes it) and completes without one.  A worker
    stopped mid-turn (a deploy) takes its record back, so the next worker runs the
    message as a plain rerun, not as one that killed its worker: no retry record,
    and a later crash still gets its one rerun."""
    model = FnModel(echo(), delay=5.0)
    w = pworld(model, shutdown_grace_secs=0.1)
    await w.start()
    await w.send(user_event(T, "slow", eid="e-s1"))
    deadline = time.monotonic() + 5
    while not model.requests:  # the turn is under way
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    record = await w.redis.hget(keys.sent(T), "e-s1#s:0")
    assert record is not None
    assert MessageRef.from_dict(orjson.loads(record)).message_id == "started:w1-0"
    await w.stop()  # past the grace: the turn is cancelled, its message stays queued
    assert await w.redis.llen(keys.mailbox(T)) == 1
    assert await w.redis.hlen(keys.sent(T)) == 0  # the record went with the lock
    # the next worker (another name) begins it, and dies: its record stays
    model.requests.clear()
    await w.start()  # w2-0
    deadline = time.monotonic() + 5
    while not model.requests:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    worker, _stop, task = w.workers[0]

    async def dead(*_args: Any) -> None:  # a killed process lets go of nothing
        return None

    worker.delivery.release = dead  # type: ignore[method-assign]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await w.redis.delete(keys.lock(T))  # its lock expired
    await worker.agent.shutdown()
    w.workers.clear()
    assert await w.redis.hexists(keys.sent(T), "e-s1#s:0")
    # ... so the one after it reruns the message: once, not given up (the shutdown
    # before did not count)
    model.delay = 0
    await w.start()  # w3-0
    await w.settle(T)
    assert w.texts(T) == ["echo: slow"]
    assert await w.redis.hlen(keys.sent(T)) == 0  # the retry record went with the message


async def test_a_rerun_answers_its_message_alone(pworld: Any) -> None:
    """The rerun of an execution that died takes nothing that arrived meanwhile into
    its turn: a later message (a file that ran the worker out of memory, say) must not
    take the innocent first one down with it.  Each gets a turn of its own."""
    model = FnModel(echo())
    w = pworld(model)
    await w.send(user_event(T, "first", eid="e-a1"))
    await w.send(user_event(T, "second", eid="e-a2"))
    await _seed_start(w, T, "e-a1")
    await w.start()
    await w.settle(T)
    said = [r.messages[-1].content for r in model.requests]
    assert said == ["first", "second"], said
    assert w.texts(T) == ["echo: first", "echo: second"]


async def test_a_plain_message_that_kills_three_workers_is_dropped_with_a_notice(
    pworld: Any, valkey: Any, tmp_path: Path
) -> None:
    """Nothing reaches the chat before the model answers, so a worker killed while it
    waits (out of memory, a crash in native code, anything before the first word)
    leaves only the turn's start record.  The next worker runs the message once more
    (alongside whatever else it runs), the one after that once more alone; when that
    one is killed too, the message is given up with a notice, instead of taking every
    worker down in turn and leaving the thread silent."""
    llm = FakeLLMServer()

    def never_in_time(path: str, body: Any) -> Any:
        r = openai_stream(["too late"])
        r.delay = 60
        return r

    llm.responder = never_in_time
    await llm.start()
    w = pworld(FnModel(echo()), lock_ttl_secs=1.0)
    owners: list[bytes] = []
    try:
        await w.send(user_event(T, "poison", eid="e-p"))
        for n in range(3):
            log = (tmp_path / f"worker{n}.log").open("wb")
            proc = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "bots.cli", "run", "worker"),
                env=_worker_env(valkey, llm),
                cwd=ROOT,
                stdout=log,
                stderr=log,
            )
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:  # a start record by a new worker
                    record = await w.redis.hget(keys.sent(T), "e-p#s:0")
                    if record is not None and record not in owners:
                        owners.append(record)
                        break
                    await asyncio.sleep(0.05)
                assert len(owners) == n + 1, f"worker {n} never began the turn"
                # killed while it waits for the model: its retry record (written
                # before the call) is in, whatever the timing of its round trips
                while time.monotonic() < deadline and len(llm.requests) < n + 1:
                    await asyncio.sleep(0.05)
                assert len(llm.requests) == n + 1, f"worker {n} never called the model"
            finally:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
        # the second ran it as a rerun, the third as a rerun alone
        assert await w.redis.hexists(keys.sent(T), "e-p#r:c")
        assert await w.redis.hexists(keys.sent(T), "e-p#r:0")
        await w.start()
        await w.settle(T, 15)
    finally:
        await llm.stop()
    texts = w.texts(T)
    assert len(texts) == 1 and "gave up on that message" in texts[0], texts
    assert not w.model.requests  # not run a third time
    assert await w.redis.llen(keys.mailbox(T)) == 0
    assert await w.redis.hlen(keys.sent(T)) == 0
    assert await w.redis.exists(keys.lock(T)) == 0
    await w.send(user_event(T, "hello again"))
    await w.settle(T)
    assert w.texts(T)[-1] == "echo: hello again"


async def test_a_turn_that_fails_unexpectedly_says_so_and_the_next_is_answered(
    pworld: Any,
) -> None:
    """A bug must not leave the person waiting in silence."""
    from agent_core.llm.base import Completion, CompletionRequest

    def rule(req: CompletionRequest) -> Completion:
        if "boom" in req.messages[-1].content:
            raise KeyError("a bug")  # not an LLM error: nothing in the turn expects it
        return Completion("echo: " + req.messages[-1].content)

    w = pworld(FnModel(rule))
    await w.start()
    await w.send(user_event(T, "boom"))
    await w.settle(T)
    assert "Something went wrong on my side" in w.texts(T)[-1]
    assert await w.redis.hlen(keys.sent(T)) == 0
    await w.send(user_event(T, "fine now"))
    await w.settle(T)
    assert w.texts(T)[-1] == "echo: fine now"


@pytest.mark.parametrize("reruns", [0, 1, 2], ids=["fresh", "first-reruns", "second-reruns"])
async def test_second_reruns_of_a_dead_workers_turns_run_one_at_a_time(
    pworld: Any, reruns: int
) -> None:
    """A worker that died ran many turns; most crashes are no message's fault, so their
    first reruns run together (the chats are answered again at once).  If a worker dies
    again while running them, at most one of those killed it: their second reruns go
    one at a time in a worker, so that the one that kills again takes no innocent rerun
    down with it (each of those would be given up)."""
    running = peak = 0

    class Counting(FnModel):
        async def complete(self, request: Any) -> Any:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            try:
                return await super().complete(request)
            finally:
                running -= 1

    w = pworld(Counting(echo(), delay=0.3))
    threads = [ThreadKey("web", "local", f"q{i}") for i in range(3)]
    for i, t in enumerate(threads):
        await w.send(user_event(t, f"m{i}", eid=f"e-q{i}"))
        if reruns:
            await _seed_start(w, t, f"e-q{i}")
        if reruns == 2:
            await _seed_part(w, t, f"e-q{i}#r:c")
    await w.start()
    for t in threads:
        await w.settle(t)
    assert [w.texts(t) for t in threads] == [["echo: m0"], ["echo: m1"], ["echo: m2"]]
    assert peak == (1 if reruns == 2 else 3)
    for t in threads:
        assert await w.redis.hlen(keys.sent(t)) == 0  # retry records went with the turns


async def test_a_rerun_that_fails_to_record_its_retry_does_not_block_the_others(
    pworld: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis trouble when a second rerun records its retry (likely right after a
    crash): the rerun stays queued, and the one-at-a-time slot is given back to the
    next rerun."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from agent_core.store.delivery import Delivery

    w = pworld(FnModel(echo()))
    t1, t2 = ThreadKey("web", "local", "r1"), ThreadKey("web", "local", "r2")
    for t, eid in ((t1, "e-r1"), (t2, "e-r2")):
        await w.send(user_event(t, eid, eid=eid))
        await _seed_start(w, t, eid)
        await _seed_part(w, t, f"{eid}#r:c")
    failed: list[str] = []
    real = Delivery.record_sent

    async def flaky(self: Delivery, thread: ThreadKey, field: str, ref: MessageRef) -> None:
        if field.endswith("#r:0") and not failed:
            failed.append(field)
            raise RedisConnectionError("Redis went away")
        await real(self, thread, field, ref)

    monkeypatch.setattr(Delivery, "record_sent", flaky)
    await w.start()
    await w.settle(t2)
    await w.settle(t1)
    await w.workers[0][0].sweep_once()  # the one that failed is run again
    await w.settle(t1)
    assert len(failed) == 1
    assert w.texts(t1) == ["echo: e-r1"] and w.texts(t2) == ["echo: e-r2"]
