"""Bench plumbing: Valkey, fakes, subprocesses, CPU/RSS probes, load drivers, reports.

Everything listens on 127.0.0.1 (Valkey on a unix socket).  The fakes (Telegram
Bot API, LLM) and the load generator share this process's event loop; its CPU
is reported as the "fakes + load" share.  Parley (web, worker) and the floor bot
run as real subprocesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import json
import logging
import os
import platform
import re
import resource
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from redis.asyncio import Redis
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from agent_core.store import keys
from tests.fakes.llm_servers import FakeLLMServer, Reply, openai_stream
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
WEBHOOK_ATTEMPTS = 3  # deliveries of one update when the connection fails (Telegram retries too)
console = Console(stderr=True, highlight=False)


class BenchError(Exception):
    """A run that cannot go on (a process died, a deadline passed)."""


# --- small utilities -----------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raise_fd_limit(want: int = 65536) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    del soft


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def host_jiffies() -> tuple[int, int] | None:
    """(steal, all) clock ticks of the whole machine from /proc/stat; steal is time
    the hypervisor ran something else while this VM had work (None off Linux)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time stolen between two ``host_jiffies()``."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 3)


def rss_mb(pid: int, peak: bool = False) -> float:
    key = "VmHWM:" if peak else "VmRSS:"
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def lat_summary(lat_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in lat_s]
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 50), 2),
        "p95_ms": round(pct(ms, 95), 2),
        "p99_ms": round(pct(ms, 99), 2),
        "max_ms": round(max(ms), 2) if ms else float("nan"),
        "mean_ms": round(statistics.fmean(ms), 2) if ms else float("nan"),
    }


def machine_info(valkey_version: str = "") -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_gb = 0.0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    import redis as redis_py
    import telegram

    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": mem_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "valkey": valkey_version,
        "python_telegram_bot": telegram.__version__,
        "redis_py": redis_py.__version__,
        "event_loop": _parley_loop() + "; the floor and the harness: asyncio",
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _parley_loop() -> str:
    """What `parley run` picks under this environment's EVENT_LOOP."""
    from bots.event_loop import pick, uvloop_version

    picked = pick((os.environ.get("EVENT_LOOP") or "auto").strip().lower())
    if picked == "uvloop":
        return f"Parley: uvloop {uvloop_version()}"
    return "Parley: asyncio" if picked else "Parley: none (EVENT_LOOP=uvloop, not installed)"


# --- processes --------------------------------------------------------------------
@dataclass
class Proc:
    name: str
    proc: asyncio.subprocess.Process
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        return ""

    def check(self) -> None:
        if self.proc.returncode is not None:
            raise BenchError(
                f"{self.name} exited with {self.proc.returncode}; log tail:\n{self.tail()}"
            )


async def spawn(name: str, args: list[str], env: dict[str, str], logdir: Path) -> Proc:
    log = logdir / f"{name}.log"
    fh = log.open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env, cwd=ROOT, stdout=fh, stderr=fh
    )
    fh.close()
    return Proc(name, proc, log)


async def stop_procs(procs: list[Proc]) -> None:
    for p in procs:
        if p.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                p.proc.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            await asyncio.wait_for(p.proc.wait(), 15)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                p.proc.kill()
            await p.proc.wait()


async def wait_http(url: str, procs: list[Proc], timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            for p in procs:
                p.check()
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with s.get(url) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise BenchError(f"{url} did not answer within {timeout:.0f} s")


# --- the fakes ----------------------------------------------------------------------
class Tracker:
    """Outstanding turns by chat id (one at a time per chat) and their latencies."""

    def __init__(self) -> None:
        self.pending: dict[int, tuple[float, asyncio.Future[float]]] = {}
        self.latencies: list[float] = []
        self.replies = 0
        self.errors = 0
        self.errors_by_kind: dict[str, int] = {}
        self.retries_by_kind: dict[str, int] = {}  # webhook deliveries sent again
        self.offset = 0.0  # subtracted from every latency (the fake LLM's own time)

    def expect(self, chat: int) -> asyncio.Future[float]:
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.pending[chat] = (time.monotonic(), fut)
        return fut

    def got(self, chat: int, at: float) -> None:
        item = self.pending.pop(chat, None)
        if item is None:
            return
        t0, fut = item
        lat = at - t0 - self.offset
        self.latencies.append(lat)
        self.replies += 1
        if not fut.done():
            fut.set_result(lat)

    def fail(self, chat: int, kind: str) -> None:
        self.errors += 1
        self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
        item = self.pending.pop(chat, None)
        if item is not None and not item[1].done():
            item[1].set_result(float("nan"))

    def reset_window(self) -> None:
        self.latencies = []
        self.replies = 0


class BenchTelegram(FakeTelegram):
    """FakeTelegram without rate limits, bounded memory and a reply hook."""

    def __init__(self, tracker: Tracker, **kw: Any) -> None:
        super().__init__(**kw)
        self.tracker = tracker
        self.counts: dict[str, int] = {}
        self.first_visible: dict[int, float] = {}  # chat -> first sendMessage time

    async def _dispatch(self, method: str, p: dict[str, Any]) -> Any:
        result = await super()._dispatch(method, p)
        self.counts[method] = self.counts.get(method, 0) + 1
        if method == "sendMessage":
            now = time.monotonic()
            chat = int(p["chat_id"])
            self.first_visible.setdefault(chat, now)
            self.tracker.got(chat, now)
        if len(self.calls) > 5000:
            self.calls.clear()
        if len(self.messages) > 50_000:
            for k in list(itertools.islice(self.messages, 25_000)):
                del self.messages[k]
        return result


class BenchLLM(FakeLLMServer):
    """The fake LLM, counting requests in flight and the first content token's time."""

    def __init__(self, *, latency: float = 0.0) -> None:
        super().__init__(latency=latency)
        self.in_flight = 0
        self.peak_in_flight = 0
        self.first_token: dict[int, float] = {}  # chat marker -> monotonic time
        self.served = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await self._serve(request)
        finally:
            self.in_flight -= 1
            self.served += 1

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw) if raw else {}
        if len(self.requests) > 1000:
            self.requests.clear()
        reply = self.responder(request.path, body if isinstance(body, dict) else {})
        if self.latency + reply.delay:
            await asyncio.sleep(self.latency + reply.delay)
        if reply.events is None:
            return web.Response(body=orjson.dumps(reply.json), content_type="application/json")
        chat = _chat_marker(body)
        resp = web.StreamResponse(status=200, headers={"content-type": "text/event-stream"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        first = True
        for name, data in reply.events:
            payload = data if isinstance(data, str) else orjson.dumps(data).decode()
            frame = (f"event: {name}\n" if name else "") + f"data: {payload}\n\n"
            await resp.write(frame.encode())
            if first and '"content"' in payload and chat is not None:
                self.first_token.setdefault(chat, time.monotonic())
                first = False
            if reply.event_delay:
                await asyncio.sleep(reply.event_delay)
        await resp.write_eof()
        return resp


CHAT_RE = re.compile(r"\bc(\d+)\b")


def _chat_marker(body: Any) -> int | None:
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            found = CHAT_RE.search(m["content"])
            return int(found.group(1)) if found else None
    return None


def echo_responder(pieces: int = 1, event_delay: float = 0.0) -> Callable[[str, Any], Reply]:
    """An OpenAI stream answering 'echo: <last user text>' in ``pieces`` chunks."""

    def respond(path: str, body: Any) -> Reply:
        text = ""
        for m in reversed(body.get("messages") or []):
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                text = m["content"]
                break
        full = "echo: " + text
        if pieces <= 1:
            chunks = [full]
        else:
            words = [f"word{i} " for i in range(pieces - 1)]
            chunks = [full + " ", *words]
        return openai_stream(chunks, model="fake", event_delay=event_delay)

    return respond


# --- the box: Valkey + fakes + processes ---------------------------------------------
@dataclass
class Box:
    tmp: Path
    tracker: Tracker
    tg: BenchTelegram
    llm: BenchLLM
    redis: Redis
    valkey_url: str
    valkey_pid: int
    valkey_version: str
    procs: list[Proc] = field(default_factory=list)
    http: aiohttp.ClientSession | None = None
    webhook_url: str = ""
    webhook_headers: dict[str, str] = field(default_factory=dict)

    def target(self) -> tuple[str, dict[str, str]]:
        """Where load goes now (set by the last start_floor / start_parley)."""
        return self.webhook_url, dict(self.webhook_headers)

    def aim(self, target: tuple[str, dict[str, str]]) -> None:
        self.webhook_url, self.webhook_headers = target[0], dict(target[1])

    chats: itertools.count[int] = field(default_factory=lambda: itertools.count(1_000_000))

    # -- subprocesses -----------------------------------------------------------
    def parley_env(self, port: int, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.endswith(("_API_KEY", "_TOKEN", "_SECRET")) and not k.startswith("BENCH_")
        }
        env.update(
            PARLEY_ENV_FILE=os.devnull,
            PARLEY_DATA_DIR=str(self.tmp / "parley-data"),
            REDIS_URL=self.valkey_url,
            PORT=str(port),
            HOST="127.0.0.1",
            PUBLIC_URL=f"http://127.0.0.1:{port}",
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_API_BASE_URL=self.tg.base_url,
            TELEGRAM_WEBHOOK_SECRET=WEBHOOK_SECRET,
            TELEGRAM_MODE="webhook",
            LLM_BACKEND="openai_compatible",
            LLM_BASE_URL=self.llm.openai_url,
            LLM_MODEL="fake",
            LLM_MAX_RETRIES="0",
            DM_POLICY="open",
            GROUP_POLICY="open",
            USER_RATE_LIMIT="",
            LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    async def start_parley(
        self, *, workers: int = 1, paced: bool = False, count_rtt: bool = False, **extra: str
    ) -> list[Proc]:
        """web + ``workers`` worker processes; returns them (also kept in self.procs)."""
        port = free_port()
        env = self.parley_env(port, **extra)
        if not paced:
            # Unpaced sends (the fake Bot API enforces no limits in the bench).
            env["TELEGRAM_CHAT_INTERVAL_SECS"] = "0"
            env["TELEGRAM_GLOBAL_RATE"] = "0"
        if count_rtt:
            env["BENCH_RTT_FILE"] = str(self.tmp / "rtt")
        procs = [await spawn("parley-web", ["-m", "bench.launch", "run", "web"], env, self.tmp)]
        for i in range(workers):
            procs.append(
                await spawn(
                    f"parley-worker{i}", ["-m", "bench.launch", "run", "worker"], env, self.tmp
                )
            )
        self.procs.extend(procs)
        await wait_http(f"http://127.0.0.1:{port}/healthz", procs)
        self.webhook_url = f"http://127.0.0.1:{port}/telegram/webhook"
        self.webhook_headers = {
            "X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET,
            "Content-Type": "application/json",
        }
        await self._wait_consumers(workers, procs)
        return procs

    async def _wait_consumers(self, n: int, procs: list[Proc], timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in procs:
                p.check()
            with contextlib.suppress(Exception):
                groups = await self.redis.xinfo_groups(keys.INBOX_STREAM)
                if groups and int(groups[0]["consumers"]) >= n:
                    # a consumer registers on its first XREADGROUP: it is reading now
                    return
            await asyncio.sleep(0.1)
        raise BenchError("the worker did not start consuming in time")

    async def start_floor(self, pool: int = 64, *, llm_conc: int = 0) -> list[Proc]:
        """The floor bot; with ``llm_conc`` it asks the fake LLM first, that many at once."""
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
        args = ["-m", "bench.floor_bot", "--port", str(port), "--base-url", self.tg.base_url]
        args += ["--pool", str(pool)]
        if llm_conc:
            args += ["--llm-url", self.llm.openai_url + "/chat/completions"]
            args += ["--concurrent-updates", str(llm_conc)]
        p = await spawn(f"floor-pool{pool}", args, env, self.tmp)
        self.procs.append(p)
        await wait_http(f"http://127.0.0.1:{port}/healthz", [p])
        self.webhook_url = f"http://127.0.0.1:{port}/webhook"
        self.webhook_headers = {
            "X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET,
            "Content-Type": "application/json",
        }
        return [p]

    async def stop(self, procs: list[Proc]) -> None:
        await stop_procs(procs)
        for p in procs:
            with contextlib.suppress(ValueError):
                self.procs.remove(p)

    # -- load ---------------------------------------------------------------------
    def next_chat(self) -> int:
        while True:
            c = next(self.chats)
            if c not in self.tracker.pending:
                return c

    async def post_turn(self, chat: int, text: str) -> asyncio.Future[float]:
        """POST one Telegram update for ``chat``; the future resolves at its reply."""
        assert self.http is not None
        fut = self.tracker.expect(chat)
        update = self.tg.message_update(chat, f"c{chat} {text}", user_id=chat)
        self.tg.chats.pop(chat, None)
        body = orjson.dumps(update)
        # Like Telegram, deliver again when the connection failed (a keep-alive
        # connection the server closed as it was reused, a reset under load): the
        # update id makes the retry a no-op if the first one got in.  Latency still
        # counts from the first attempt; retries are reported.
        for attempt in range(WEBHOOK_ATTEMPTS):
            try:
                async with self.http.post(
                    self.webhook_url, data=body, headers=self.webhook_headers
                ) as r:
                    await r.read()
                    if r.status != 200:
                        self.tracker.fail(chat, f"webhook {r.status}")
                return fut
            except aiohttp.ClientConnectionError as exc:
                kind = f"webhook {type(exc).__name__}: {exc}"[:120]
                if attempt + 1 == WEBHOOK_ATTEMPTS:
                    self.tracker.fail(chat, kind)
                else:
                    self.tracker.retries_by_kind[kind] = (
                        self.tracker.retries_by_kind.get(kind, 0) + 1
                    )
                    await asyncio.sleep(0.2 * (attempt + 1))
            except (aiohttp.ClientError, OSError) as exc:
                self.tracker.fail(chat, f"webhook {type(exc).__name__}: {exc}"[:120])
                return fut
        return fut

    async def drain(self, timeout: float) -> int:
        """Wait for outstanding replies; count the ones that never came as errors."""
        deadline = time.monotonic() + timeout
        while self.tracker.pending and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        missing = list(self.tracker.pending)
        for chat in missing:
            self.tracker.fail(chat, "no reply")
        return len(missing)


@contextlib.asynccontextmanager
async def box(llm_latency: float = 0.0) -> AsyncIterator[Box]:
    from agent_core.store.embedded import EmbeddedValkey

    raise_fd_limit()
    # the fakes log every client that hangs up mid-request (cancelled typing calls)
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    tmp = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    valkey = EmbeddedValkey(tmp / "valkey")
    await valkey.start()
    redis = Redis.from_url(valkey.url)
    tracker = Tracker()
    tg = BenchTelegram(tracker)
    llm = BenchLLM(latency=llm_latency)
    llm.responder = echo_responder()
    await tg.start()
    await llm.start()
    info = await redis.info("server")
    version = str(info.get("valkey_version") or info.get("redis_version") or "")
    b = Box(tmp, tracker, tg, llm, redis, valkey.url, int(info["process_id"]), version)
    b.http = aiohttp.ClientSession(
        # idle connections are dropped before the server's keep-alive could close them
        # (WEB_KEEPALIVE_SECS, 95 s; the floor's uvicorn keeps uvicorn's 5 s)
        connector=aiohttp.TCPConnector(limit=512, force_close=False, keepalive_timeout=4),
        timeout=aiohttp.ClientTimeout(total=30),
    )
    try:
        yield b
    finally:
        await stop_procs(b.procs)
        await b.http.close()
        await llm.stop()
        await tg.stop()
        await redis.aclose()
        await valkey.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


# --- CPU windows ------------------------------------------------------------------
class CpuWindow:
    """CPU seconds of the given processes (+ this one, + Valkey) over a window."""

    def __init__(self, b: Box, procs: list[Proc]) -> None:
        self.pids = {p.name: p.pid for p in procs}
        self.pids["valkey"] = b.valkey_pid
        self.start: dict[str, float] = {}
        self.t0 = 0.0
        self.host0: tuple[int, int] | None = None

    def _sample(self) -> dict[str, float]:
        out = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        out["fakes+load (harness)"] = time.process_time()
        return out

    def begin(self) -> None:
        self.start = self._sample()
        self.t0 = time.monotonic()
        self.host0 = host_jiffies()

    def end(self) -> dict[str, Any]:
        now = self._sample()
        wall = time.monotonic() - self.t0
        used = {k: round(now[k] - self.start[k], 3) for k in now}
        steal = steal_share(self.host0, host_jiffies())
        return {"wall_s": round(wall, 3), "cpu_s": used, "host_steal": steal}


# --- load drivers -----------------------------------------------------------------
async def open_loop(
    b: Box, rate: float, duration: float, progress: Callable[[float], None] | None = None
) -> None:
    """POST at ``rate`` updates/s for ``duration`` s, each to a fresh chat."""
    start = time.monotonic()
    tasks: set[asyncio.Task[Any]] = set()
    i = 0
    while True:
        due = start + i / rate
        if due - start >= duration:
            break
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        t = asyncio.create_task(b.post_turn(b.next_chat(), "hello there"))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
        i += 1
        if progress is not None and i % 50 == 0:
            progress(time.monotonic() - start)
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


async def closed_loop(
    b: Box, users: int, duration: float, progress: Callable[[float], None] | None = None
) -> None:
    """``users`` concurrent users, each sending its next message when answered."""
    stop_at = time.monotonic() + duration

    async def user() -> None:
        while time.monotonic() < stop_at:
            fut = await b.post_turn(b.next_chat(), "hello there")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, 20)

    async def ticker() -> None:
        start = time.monotonic()
        while time.monotonic() < stop_at:
            if progress is not None:
                progress(time.monotonic() - start)
            await asyncio.sleep(0.25)

    await asyncio.gather(ticker(), *[user() for _ in range(users)])


# --- progress + reporting -----------------------------------------------------------
class Phases:
    """A rich progress bar per timed phase."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )

    def __enter__(self) -> Phases:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def phase(self, name: str, seconds: float, b: Box | None = None) -> Callable[[float], None]:
        task = self.progress.add_task(name, total=seconds, info="")

        def update(elapsed: float) -> None:
            info = f"{b.tracker.replies} replies, {b.tracker.errors} errors" if b else ""
            self.progress.update(task, completed=min(elapsed, seconds), info=info)

        return update

    def note(self, text: str) -> None:
        self.progress.console.print(text)


_STYLE = re.compile(r"\[/?(?:bold |dim )?(?:green|red|yellow|bold|dim)?\]")  # rich colour tags


def write_results(
    scenario: str, data: dict[str, Any], table: Table, notes: list[str], out_dir: Path
) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y-%m-%d")
    jpath = out_dir / f"{stamp}-{scenario}.json"
    mpath = out_dir / f"{stamp}-{scenario}.md"
    jpath.write_text(json.dumps(data, indent=2, default=str) + "\n")
    lines = [f"# parley bench {scenario} — {data.get('started', '')}", ""]
    m = data.get("machine", {})
    lines.append(
        f"Machine: {m.get('cores')} cores, {m.get('cpu_model')}, {m.get('memory_gb')} GB; "
        f"Python {m.get('python')}; Valkey {m.get('valkey')}; "
        f"python-telegram-bot {m.get('python_telegram_bot')}; redis-py {m.get('redis_py')}; "
        f"{m.get('event_loop')}."
    )
    lines.append("")
    lines.append(f"Command: `{data.get('command', '')}`")
    lines.append("")
    lines.append("| " + " | ".join(str(c.header) for c in table.columns) + " |")
    lines.append("|" + "---|" * len(table.columns))
    cells = [list(c.cells) for c in table.columns]
    for row in zip(*cells, strict=True):
        lines.append("| " + " | ".join(_STYLE.sub("", str(v)) for v in row) + " |")
    if notes:
        lines.append("")
        lines += [f"- {n}" for n in notes]
    mpath.write_text("\n".join(lines) + "\n")
    return jpath, mpath
