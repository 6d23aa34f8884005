"""A real cluster on loopback for the fault tests and ``bench/chaos.py``.

One ``web`` process and N ``worker`` processes (``python -m bots.cli run ROLE``)
share one Valkey; the fake OpenAI-compatible LLM answers every turn with all
the user messages it was given since the last answer ("got m3-7 m3-8"), so each
reply says exactly which inbound messages it covers.  Load goes through the
local web chat (``POST /api/messages`` with a client id, retried with the same
id on a 5xx or a transport error, as the page does): its answers come back
through a per-thread Redis stream, with no platform pacing in the way, so the
delivery machinery itself is what is measured.

:func:`audit` reads every thread's transcript and reports, per inbound message,
whether it was answered, answered twice, or answered out of order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.store import keys
from channels.web.outbox import fold_transcript
from tests.fakes.llm_servers import FakeLLMServer, Reply, openai_stream

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"\bm(\d+)-(\d+)\b")
COOKIE = "parley_web"


def long_run() -> bool:
    return os.environ.get("PARLEY_LONG", "") not in ("", "0", "false", "no")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def echo_all_since_last_answer(path: str, body: Any) -> Reply:
    """Answer with every user message since the last assistant message."""
    msgs = body.get("messages") or []
    tail: list[str] = []
    for m in reversed(msgs):
        if m.get("role") == "assistant":
            break
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            tail.append(m["content"])
    return openai_stream(["got ", " ".join(reversed(tail))], model="fake")


def base_env(redis_url: str, llm_url: str, port: int, **extra: str) -> dict[str, str]:
    """The environment of a cluster process (no real keys from the caller's env)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET")) and not k.startswith("PARLEY_LONG")
    }
    env.update(
        PARLEY_ENV_FILE=os.devnull,
        REDIS_URL=redis_url,
        PORT=str(port),
        HOST="127.0.0.1",
        WEB_CHAT_ENABLED="true",
        LLM_BACKEND="openai_compatible",
        LLM_BASE_URL=llm_url,
        LLM_MODEL="fake",
        LLM_MAX_RETRIES="0",
        DM_POLICY="open",
        GROUP_POLICY="open",
        USER_RATE_LIMIT="",
        LOCK_TTL_SECS="3",
        RECLAIM_IDLE_SECS="2",
        SWEEP_INTERVAL_SECS="0.5",
        SHUTDOWN_GRACE_SECS="10",
        LOG_LEVEL=os.environ.get("FAULT_LOG_LEVEL", "WARNING"),
    )
    env.update(extra)
    return env


@dataclass
class Proc:
    role: str
    log: Path
    proc: asyncio.subprocess.Process
    started: float = field(default_factory=time.monotonic)


class Cluster:
    """1 web + ``workers`` worker subprocesses on ``redis_url``."""

    def __init__(
        self,
        redis_url: str,
        workdir: Path,
        *,
        workers: int = 3,
        llm_latency: float = 0.02,
        env: dict[str, str] | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.workdir = workdir
        self.n_workers = workers
        self.llm = FakeLLMServer(latency=llm_latency)
        self.llm.responder = echo_all_since_last_answer
        self.extra_env = env or {}
        self.port = free_port()
        self.web: Proc | None = None
        self.workers: list[Proc] = []
        self.spawned = 0
        self.env: dict[str, str] = {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def spawn(self, role: str) -> Proc:
        self.spawned += 1
        log = self.workdir / f"{role}{self.spawned}.log"
        fh = log.open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bots.cli",
            "run",
            role,
            env=self.env,
            cwd=ROOT,
            stdout=fh,
            stderr=fh,
        )
        fh.close()
        return Proc(role, log, proc)

    async def start(self) -> Cluster:
        await self.llm.start()
        self.env = base_env(self.redis_url, self.llm.openai_url, self.port, **self.extra_env)
        self.web = await self.spawn("web")
        for _ in range(self.n_workers):
            self.workers.append(await self.spawn("worker"))
        await self.wait_ready(30)
        return self

    async def wait_ready(self, timeout: float) -> float:
        """Seconds until the web process answers /readyz 200."""
        t0 = time.monotonic()
        async with httpx.AsyncClient(base_url=self.base_url, timeout=2) as client:
            while time.monotonic() - t0 < timeout:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        return time.monotonic() - t0
                await asyncio.sleep(0.05)
        raise AssertionError(f"web not ready after {timeout} s; see {self.workdir}")

    def kill_worker(self, i: int, sig: int = signal.SIGKILL) -> None:
        p = self.workers[i].proc
        if p.returncode is None:
            p.send_signal(sig)

    async def replace_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` and start a new one in its place."""
        self.kill_worker(i)
        await self.workers[i].proc.wait()
        self.workers[i] = await self.spawn("worker")

    def alive(self) -> list[Proc]:
        procs = ([self.web] if self.web else []) + self.workers
        return [p for p in procs if p.proc.returncode is None]

    def exits(self) -> list[tuple[str, int | None]]:
        procs = ([self.web] if self.web else []) + self.workers
        return [(p.role, p.proc.returncode) for p in procs]

    async def stop(self) -> None:
        procs = ([self.web] if self.web else []) + self.workers
        for p in procs:
            if p.proc.returncode is None:
                p.proc.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.wait_for(p.proc.wait(), 25)
            except TimeoutError:
                p.proc.kill()
                await p.proc.wait()
        await self.llm.stop()

    def logs(self) -> str:
        out = []
        for f in sorted(self.workdir.glob("*.log")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)


# --- the web chat load ----------------------------------------------------------
@dataclass
class Chat:
    index: int
    cookie: str
    thread: str
    next_n: int = 0


class WebLoad:
    """Chats on the web chat of a cluster; posts numbered messages, retrying like a browser."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.client = httpx.AsyncClient(base_url=base_url, timeout=10)
        self.chats: list[Chat] = []
        self.accepted = 0  # messages whose POST eventually got 202
        self.gave_up = 0  # messages never acknowledged (not counted as sent)
        self.retries = 0
        self.sent_ids: set[tuple[int, int]] = set()
        self._locks: dict[int, asyncio.Lock] = {}

    async def open_chats(self, n: int) -> None:
        for i in range(n):
            for _ in range(100):
                try:
                    async with httpx.AsyncClient(base_url=self.base_url, timeout=5) as c:
                        r = await c.get("/api/me")
                        cookie = c.cookies[COOKIE]
                        thread = r.json()["thread"]
                    break
                except (httpx.HTTPError, KeyError):
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("could not open a web chat session")
            self.chats.append(Chat(i, cookie, thread))

    async def post(self, chat: Chat, deadline_s: float = 30.0) -> bool:
        """Post the chat's next message; retry (same id) until 202 or ``deadline_s``."""
        n = chat.next_n
        chat.next_n += 1
        body = {"text": f"m{chat.index}-{n}", "id": f"ev{chat.index:05d}x{n:07d}"}
        headers = {"cookie": f"{COOKIE}={chat.cookie}"}
        t0 = time.monotonic()
        while time.monotonic() - t0 < deadline_s:
            try:
                r = await self.client.post("/api/messages", json=body, headers=headers)
                self.client.cookies.clear()
                if r.status_code == 202:
                    self.accepted += 1
                    self.sent_ids.add((chat.index, n))
                    return True
                if r.status_code < 500:
                    raise AssertionError(f"web chat refused a message: {r.status_code} {r.text}")
            except httpx.TransportError:
                pass
            self.retries += 1
            await asyncio.sleep(0.1)
        self.gave_up += 1
        return False

    async def run(
        self,
        rate: float,
        duration: float,
        on_tick: Callable[[float], Any] | None = None,
    ) -> None:
        """``rate`` messages/s spread round-robin over the chats for ``duration`` s."""
        tasks: set[asyncio.Task[bool]] = set()
        t0 = time.monotonic()
        i = 0
        while (elapsed := time.monotonic() - t0) < duration:
            due = int(elapsed * rate) + 1
            while i < due:
                chat = self.chats[i % len(self.chats)]
                # a chat's messages are posted in order: wait for its previous post
                task = asyncio.create_task(self._post_after(chat, tasks))
                tasks.add(task)
                i += 1
            if on_tick is not None:
                res = on_tick(elapsed)
                if asyncio.iscoroutine(res):
                    await res
            await asyncio.sleep(0.01)
        if tasks:
            await asyncio.gather(*tasks)

    async def _post_after(self, chat: Chat, tasks: set[asyncio.Task[bool]]) -> bool:
        lock = self._locks.setdefault(chat.index, asyncio.Lock())
        async with lock:
            return await self.post(chat)

    async def close(self) -> None:
        await self.client.aclose()


@dataclass
class Audit:
    sent: int
    answered: int
    lost: list[tuple[int, int]]
    duplicated: list[tuple[int, int]]
    out_of_order: list[int]
    errors: list[str]
    orders: dict[int, list[int]] = field(default_factory=dict)
    # lost messages the user was told about: a message whose two executions both died
    # is given up with a notice (docs/reliability.md), at most one per notice per chat
    given_up: list[tuple[int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order)


GAVE_UP = "gave up on that message"  # agent_core.proactive.recovery.INTERRUPTED_DROPPED


async def read_coverage(
    redis: Redis, load: WebLoad, notices: dict[int, int] | None = None
) -> tuple[dict[int, list[int]], list[str]]:
    """Per chat, the message numbers its answers cover; the answers covering none.
    ``notices``, when given, gets the count of give-up notices per chat."""
    from agent_core.events import ThreadKey

    covered: dict[int, list[int]] = {}
    errors: list[str] = []
    for chat in load.chats:
        entries = await redis.xrange(keys.outbox_stream(ThreadKey.parse(chat.thread)))
        order: list[int] = []
        for item in fold_transcript(entries):
            if item.get("kind") != "message":
                continue
            text = str(item.get("tx", ""))
            nums = [int(m.group(2)) for m in MARK.finditer(text) if int(m.group(1)) == chat.index]
            if not nums and text:
                errors.append(text[:120])
                if notices is not None and GAVE_UP in text:
                    notices[chat.index] = notices.get(chat.index, 0) + 1
            order.extend(nums)
        covered[chat.index] = order
    return covered, errors


async def audit(redis: Redis, load: WebLoad, *, wait: float = 60.0, settle: float = 2.0) -> Audit:
    """Wait until every accepted message is answered (or ``wait`` passes), then check."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        told: dict[int, int] = {}
        try:
            covered, _ = await read_coverage(redis, load, told)
        except RedisError:  # the server may be restarting (redis_restart scenario)
            await asyncio.sleep(0.25)
            continue
        got = {(c, n) for c, ns in covered.items() for n in ns}
        missing = Counter(c for c, _n in load.sent_ids - got)
        if all(told.get(c, 0) >= k for c, k in missing.items()):
            break  # everything answered, or given up with a notice
        await asyncio.sleep(0.25)
    await asyncio.sleep(settle)  # a late duplicate would show up now
    notices: dict[int, int] = {}
    covered, errors = await read_coverage(redis, load, notices)
    got_list = [(c, n) for c, ns in covered.items() for n in ns]
    got = set(got_list)
    lost, given_up = [], []
    for chat, n in sorted(load.sent_ids - got):
        if notices.get(chat, 0) > 0:
            notices[chat] -= 1
            given_up.append((chat, n))
        else:
            lost.append((chat, n))
    dup = (
        sorted({x for x in got_list if got_list.count(x) > 1}) if len(got) != len(got_list) else []
    )
    ooo = [c for c, ns in covered.items() if ns != sorted(ns)]
    return Audit(
        len(load.sent_ids),
        len(got & load.sent_ids),
        lost,
        dup,
        ooo,
        errors,
        {c: covered[c] for c in ooo},
        given_up,
    )


async def leftovers(redis: Redis) -> dict[str, int]:
    """What is still queued: active threads, pending stream entries, mailboxes."""
    pending = 0
    with contextlib.suppress(Exception):
        pending = int((await redis.xpending(keys.INBOX_STREAM, keys.INBOX_GROUP))["pending"])
    mailboxes = 0
    async for _ in redis.scan_iter(keys.PREFIX + "{*}:mailbox", count=1000):
        mailboxes += 1
    return {
        "active": int(await redis.zcard(keys.ACTIVE_THREADS)),
        "pending": pending,
        "mailboxes": mailboxes,
    }


async def wait_drained(redis: Redis, timeout: float = 20.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    left = await leftovers(redis)
    while any(left.values()) and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        left = await leftovers(redis)
    return left
