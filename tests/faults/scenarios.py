"""The fault scenarios, as plain coroutines returning their figures.

The pytest files in this package run them short (CI) or long (``PARLEY_LONG=1``
or ``-m slow``); ``bench/chaos.py`` runs them long and records the figures
quoted in docs/reliability.md.  Each returns a dict of counts and seconds and
never asserts itself, so a bench run reports figures even when one is bad.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from agent_core.store.embedded import EmbeddedValkey
from tests.fakes.llm_servers import Reply, openai_error, openai_stream
from tests.faults.harness import Cluster, WebLoad, audit, read_coverage, wait_drained


async def _fresh_redis(url: str) -> Redis:
    r = Redis.from_url(url)
    await r.flushdb()
    return r


# --- 1. worker SIGKILL under load -------------------------------------------------
async def worker_kill(
    redis_url: str,
    workdir: Path,
    *,
    rate: float = 50.0,
    duration: float = 60.0,
    kill_every: float = 5.0,
    chats: int = 100,
    workers: int = 3,
    audit_wait: float = 90.0,
) -> dict[str, Any]:
    """A worker is SIGKILLed (and replaced) every ``kill_every`` s under ``rate`` msg/s."""
    redis = await _fresh_redis(redis_url)
    cluster = Cluster(redis_url, workdir, workers=workers)
    load: WebLoad | None = None
    kills = 0
    try:
        await cluster.start()
        load = WebLoad(cluster.base_url)
        await load.open_chats(chats)
        next_kill = kill_every
        bg: set[asyncio.Task[None]] = set()

        def tick(elapsed: float) -> None:
            nonlocal next_kill, kills
            if elapsed >= next_kill:
                next_kill += kill_every
                t = asyncio.create_task(cluster.replace_worker(kills % workers))
                bg.add(t)
                kills += 1

        t0 = time.monotonic()
        await load.run(rate, duration, tick)
        load_secs = time.monotonic() - t0
        await asyncio.gather(*bg)
        t1 = time.monotonic()
        result = await audit(redis, load, wait=audit_wait)
        drain_secs = time.monotonic() - t1
        left = await wait_drained(redis)
        return {
            "scenario": "worker_kill",
            "rate_per_s": rate,
            "duration_s": duration,
            "kills": kills,
            "messages": result.sent,
            "answered": result.answered,
            "lost": len(result.lost),
            "given_up_with_notice": len(result.given_up),
            "duplicated": len(result.duplicated),
            "out_of_order_chats": len(result.out_of_order),
            "achieved_rate_per_s": round(result.sent / load_secs, 1),
            "post_retries": load.retries,
            "catch_up_s": round(drain_secs, 1),
            "left_pending": sum(left.values()),
            "leftovers": left,
            "lost_ids": result.lost[:10],
            "duplicated_ids": result.duplicated[:10],
            "out_of_order": dict(list(result.orders.items())[:5]),
        }
    finally:
        if load is not None:
            await load.close()
        await cluster.stop()
        await redis.aclose()


# --- 2. Valkey killed and restarted on the same data under load -------------------
async def redis_restart(
    workdir: Path,
    *,
    rate: float = 20.0,
    duration: float = 20.0,
    kill_at: float = 5.0,
    down_for: float = 2.0,
    restarts: int = 1,
    chats: int = 20,
) -> dict[str, Any]:
    """SIGKILL the Valkey server mid-load, start it again on the same data dir."""
    data_dir = Path(tempfile.mkdtemp(prefix="parley-chaos-valkey-"))
    server = EmbeddedValkey(data_dir)
    await server.start()
    url = server.url
    redis = Redis.from_url(url)
    cluster = Cluster(url, workdir, workers=2)
    load: WebLoad | None = None
    recoveries: list[float] = []
    try:
        await cluster.start()
        load = WebLoad(cluster.base_url)
        await load.open_chats(chats)
        pending_restart: set[asyncio.Task[None]] = set()
        kill_times = [kill_at + i * (duration / max(restarts, 1)) for i in range(restarts)]

        async def bounce() -> None:
            nonlocal server
            assert server._server is not None
            server._server.terminate()  # SIGKILL: no shutdown, no AOF rewrite
            server._server = None
            await asyncio.sleep(down_for)
            t_up = time.monotonic()
            server = EmbeddedValkey(data_dir)
            await server.start()
            recoveries.append(await _ready_after(cluster, t_up))

        def tick(elapsed: float) -> None:
            busy = any(not t.done() for t in pending_restart)
            if kill_times and elapsed >= kill_times[0] and not busy:
                kill_times.pop(0)
                t = asyncio.create_task(bounce())
                pending_restart.add(t)

        await load.run(rate, duration, tick)
        await asyncio.gather(*pending_restart)
        await redis.aclose()
        redis = Redis.from_url(url)
        result = await audit(redis, load, wait=60)
        left = await wait_drained(redis)
        exits = [code for _role, code in cluster.exits()]
        return {
            "scenario": "redis_restart",
            "rate_per_s": rate,
            "duration_s": duration,
            "restarts": len(recoveries),
            "down_s": down_for,
            "messages": result.sent,
            "answered": result.answered,
            "lost": len(result.lost),
            "duplicated": len(result.duplicated),
            "out_of_order_chats": len(result.out_of_order),
            "ready_again_s": round(max(recoveries), 2) if recoveries else None,
            "ready_again_each_s": [round(r, 2) for r in recoveries],
            "never_acknowledged": load.gave_up,
            "post_retries": load.retries,
            "processes_exited": sum(1 for c in exits if c is not None),
            "left_pending": sum(left.values()),
            "lost_ids": result.lost[:10],
            "duplicated_ids": result.duplicated[:10],
            "out_of_order": dict(list(result.orders.items())[:3]),
        }
    finally:
        if load is not None:
            await load.close()
        await cluster.stop()
        with contextlib.suppress(Exception):
            await redis.aclose()
        await server.stop()


async def _ready_after(cluster: Cluster, t_up: float, timeout: float = 60.0) -> float:
    """Seconds from the server being back until the web and every worker work again.

    The web process must answer /readyz; the workers prove themselves by
    answering a probe message in a fresh chat.
    """
    await cluster.wait_ready(timeout)
    probe = WebLoad(cluster.base_url)
    try:
        await probe.open_chats(1)
        probe.chats[0].index = 999_999
        await probe.post(probe.chats[0], deadline_s=timeout)
        redis = Redis.from_url(cluster.redis_url)
        try:
            res = await audit(redis, probe, wait=timeout, settle=0)
        finally:
            await redis.aclose()
        if res.lost:
            return float("inf")
        return time.monotonic() - t_up
    finally:
        await probe.close()


# --- 3. SIGTERM mid-turn ----------------------------------------------------------
async def sigterm_mid_turn(
    redis_url: str,
    workdir: Path,
    *,
    chats: int = 6,
    llm_latency: float = 2.0,
    grace: float = 10.0,
) -> dict[str, Any]:
    """SIGTERM a worker while it holds turns: it finishes them (latency < grace) or
    hands them back (latency > grace); either way every message is answered once."""
    redis = await _fresh_redis(redis_url)
    cluster = Cluster(
        redis_url,
        workdir,
        workers=2,
        llm_latency=llm_latency,
        env={"SHUTDOWN_GRACE_SECS": str(grace)},
    )
    load: WebLoad | None = None
    try:
        await cluster.start()
        load = WebLoad(cluster.base_url)
        await load.open_chats(chats)
        for chat in load.chats:
            assert await load.post(chat)
        # wait until turns are in flight at the LLM
        for _ in range(200):
            if len(cluster.llm.requests) >= min(chats, 2):
                break
            await asyncio.sleep(0.05)
        victim = cluster.workers[0].proc
        t0 = time.monotonic()
        victim.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(victim.wait(), grace + 20)
        exit_secs = time.monotonic() - t0
        result = await audit(redis, load, wait=30 + llm_latency * 2)
        left = await wait_drained(redis)
        return {
            "scenario": "sigterm_mid_turn",
            "grace_s": grace,
            "llm_latency_s": llm_latency,
            "messages": result.sent,
            "answered": result.answered,
            "lost": len(result.lost),
            "duplicated": len(result.duplicated),
            "exit_code": code,
            "exit_s": round(exit_secs, 2),
            "left_pending": sum(left.values()),
        }
    finally:
        if load is not None:
            await load.close()
        await cluster.stop()
        await redis.aclose()


# --- 4. LLM storms ----------------------------------------------------------------
FRIENDLY = (
    "rate limited",
    "credentials",
    "not available",
    "too long for the model",
    "paused calls",
    "took too long",
    "couldn't reach the AI model",
    "stopped after too many steps",
    "empty answer",
)


def storm_reply(rng: random.Random, timeout: float) -> Reply:
    """One random fault (or a good answer) from the storm mix."""
    kind = rng.choice(["429", "500", "timeout", "cut", "slow", "ok", "ok"])
    if kind == "429":
        return openai_error(429, "rate_limit_exceeded", "slow down", retry_after=0.5)
    if kind == "500":
        return openai_error(500, "server_error", "boom", kind="server_error")
    if kind == "timeout":
        return Reply(status=200, json={}, delay=timeout + 1.0)
    if kind == "cut":
        return openai_stream(["partial ", "answ"], cut=True, model="fake")
    if kind == "slow":
        r = openai_stream(["got ", "slow"], model="fake")
        r.delay = timeout * 0.5
        return r
    return openai_stream(["got ", "fine"], model="fake")


async def llm_storm(
    redis_url: str,
    workdir: Path,
    *,
    chats: int = 6,
    per_chat: int = 6,
    seed: int = 11,
) -> dict[str, Any]:
    """Users talk through three phases: healthy, a storm of LLM faults, healthy again.

    Each user waits for the end of its turn before sending the next message, so
    every message has one turn; a turn must end (with an answer or a short error
    notice) within its time budget.
    """
    timeout, retries, threshold, recovery = 2.0, 1, 3, 1.5
    redis = await _fresh_redis(redis_url)
    cluster = Cluster(
        redis_url,
        workdir,
        workers=1,
        llm_latency=0.0,
        env={
            "LLM_MAX_RETRIES": str(retries),
            "LLM_TIMEOUT_SECS": str(timeout),
            "LLM_CONNECT_TIMEOUT_SECS": "1",
            "CIRCUIT_BREAKER_THRESHOLD": str(threshold),
            "CIRCUIT_BREAKER_RECOVERY_SECS": str(recovery),
            "LLM_RETRY_AFTER_MAX_SECS": "5",
        },
    )
    rng = random.Random(seed)
    budget = (retries + 1) * (timeout + 1.5) + 3 * 1.25 + 5.0
    outcomes: dict[str, int] = {"answer": 0, "error_notice": 0, "none": 0, "unclear": 0}
    slowest = 0.0
    circuit_open_seen = 0
    answers_after_storm = 0
    load: WebLoad | None = None
    try:
        await cluster.start()
        load = WebLoad(cluster.base_url)
        await load.open_chats(chats)

        async def talk(chat_i: int, phase: str) -> None:
            nonlocal slowest, circuit_open_seen, answers_after_storm
            assert load is not None
            chat = load.chats[chat_i]
            t0 = time.monotonic()
            n = chat.next_n
            assert await load.post(chat)
            texts = await _turn_texts(redis, chat.thread, f"ev{chat.index:05d}x{n:07d}", budget)
            took = time.monotonic() - t0
            slowest = max(slowest, took)
            if texts is None:
                outcomes["none"] += 1
                return
            joined = " ".join(texts)
            if any(t.startswith("got ") for t in texts):
                outcomes["answer"] += 1
                if phase == "after":
                    answers_after_storm += 1
            elif any(f in joined for f in FRIENDLY):
                outcomes["error_notice"] += 1
            else:
                outcomes["unclear"] += 1
            if "paused calls" in joined:
                circuit_open_seen += 1

        async def phase(name: str, rounds: int) -> None:
            for _ in range(rounds):
                await asyncio.gather(*(talk(i, name) for i in range(chats)))

        await phase("before", 1)
        cluster.llm.responder = lambda path, body: storm_reply(rng, timeout)
        await phase("storm", per_chat)
        # a burst of plain 500s to make sure the breaker trips
        cluster.llm.responder = lambda path, body: openai_error(500, "x", "down")
        await phase("storm", 1)
        from tests.faults.harness import echo_all_since_last_answer

        cluster.llm.responder = echo_all_since_last_answer
        await asyncio.sleep(recovery + 0.5)
        await phase("after", 2)
        left = await wait_drained(redis)
        total = sum(outcomes.values())
        return {
            "scenario": "llm_storm",
            "turns": total,
            "answers": outcomes["answer"],
            "error_notices": outcomes["error_notice"],
            "no_reply": outcomes["none"],
            "unclear_reply": outcomes["unclear"],
            "circuit_open_notices": circuit_open_seen,
            "answers_after_storm": answers_after_storm,
            "slowest_turn_s": round(slowest, 2),
            "turn_budget_s": budget,
            "llm_requests": len(cluster.llm.requests),
            "left_pending": sum(left.values()),
        }
    finally:
        if load is not None:
            await load.close()
        await cluster.stop()
        await redis.aclose()


def _same_event(raw: bytes, event_id: str) -> bool:
    got = raw.decode()
    return got == event_id or got.endswith("." + event_id)


async def _turn_texts(redis: Redis, thread: str, event_id: str, timeout: float) -> list[str] | None:
    """The bot's messages of the turn for ``event_id`` (until its ``done``), or None.

    The web chat scopes the page's id to the browser (``<browser>.<id>``).
    """
    from agent_core.events import ThreadKey
    from agent_core.store import keys
    from channels.web.outbox import fold_transcript

    stream = keys.outbox_stream(ThreadKey.parse(thread))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = await redis.xrange(stream)
        start = None
        for i, (_eid, f) in enumerate(entries):
            if f.get(b"t") == b"user" and _same_event(f.get(b"id", b""), event_id):
                start = i
            if (
                start is not None
                and f.get(b"t") == b"done"
                and _same_event(f.get(b"ev", b""), event_id)
            ):
                return [
                    str(m.get("tx", ""))
                    for m in fold_transcript(entries[start : i + 1])
                    if m.get("kind") == "message"
                ]
        await asyncio.sleep(0.05)
    return None


async def readyz(base_url: str) -> int:
    async with httpx.AsyncClient(base_url=base_url, timeout=2) as c:
        return (await c.get("/readyz")).status_code


# --- 5. recovery after a crash with many turns in flight --------------------------
async def crash_recovery(
    redis_url: str,
    workdir: Path,
    *,
    chats: int = 40,
    llm_latency: float = 2.0,
) -> dict[str, Any]:
    """One message in each of ``chats`` chats, all waiting on a slow LLM in one worker,
    which is SIGKILLed and replaced: how long until every chat has its answer (the
    replacement finds the turns once the dead worker's locks expire, ``LOCK_TTL_SECS``
    3 s here, and reruns them)."""
    redis = await _fresh_redis(redis_url)
    cluster = Cluster(redis_url, workdir, workers=1, llm_latency=llm_latency)
    load: WebLoad | None = None
    try:
        await cluster.start()
        load = WebLoad(cluster.base_url)
        await load.open_chats(chats)
        await asyncio.gather(*(load.post(chat) for chat in load.chats))
        deadline = time.monotonic() + 30
        while len(cluster.llm.requests) < chats and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        in_flight = len(cluster.llm.requests)
        t0 = time.monotonic()
        await cluster.replace_worker(0)
        answered_at: dict[int, float] = {}
        limit = time.monotonic() + 60 + chats * llm_latency
        while len(answered_at) < chats and time.monotonic() < limit:
            covered, _ = await read_coverage(redis, load)
            now = time.monotonic() - t0
            for c, ns in covered.items():
                if ns:
                    answered_at.setdefault(c, now)
            await asyncio.sleep(0.1)
        result = await audit(redis, load, wait=5)
        left = await wait_drained(redis)
        times = sorted(answered_at.values())
        return {
            "scenario": "crash_recovery",
            "chats": chats,
            "llm_latency_s": llm_latency,
            "in_flight_at_kill": in_flight,
            "answered": result.answered,
            "lost": len(result.lost),
            "given_up_with_notice": len(result.given_up),
            "duplicated": len(result.duplicated),
            "first_answer_after_kill_s": round(times[0], 1) if times else None,
            "median_answer_after_kill_s": round(times[len(times) // 2], 1) if times else None,
            "last_answer_after_kill_s": round(times[-1], 1) if times else None,
            "left_pending": sum(left.values()),
        }
    finally:
        if load is not None:
            await load.close()
        await cluster.stop()
        await redis.aclose()
