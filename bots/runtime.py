"""The runtime: settings -> Redis, LLM, channels, agent, worker; owns their lifecycle.

Roles (``parley run ROLE``):

* ``web``     ASGI app: webhooks, the web chat, health, metrics.  Publishes only.
* ``worker``  consumes the inbox stream and runs turns.
* ``gateway`` long-lived platform connections (Discord gateway, Slack Socket
              Mode, Telegram polling).  Publishes only.
* ``all``     everything in one process (the default on a laptop).

Without ``REDIS_URL`` an embedded Valkey is started under ``PARLEY_DATA_DIR``
(or joined, if another parley process on that dir already runs one).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError, ResponseError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from agent_core.agent.access import AccessControl
from agent_core.agent.agent import Agent
from agent_core.agent.commands import builtin_commands
from agent_core.agent.interrupt import interrupt_filter
from agent_core.errors import ConfigError
from agent_core.ingest import Ingest
from agent_core.llm.base import LLMProvider
from agent_core.metrics import METRICS
from agent_core.outbox import Outbox
from agent_core.proactive.routines import RoutineStore
from agent_core.proactive.runner import EventTriggers
from agent_core.proactive.service import Proactive
from agent_core.store import keys
from agent_core.store.client import (
    SHUTDOWN_STEP_SECS,
    RedisClients,
    bounded,
    check_reachable,
    check_writable,
    make_clients,
    redact_url,
    refused,
)
from agent_core.store.delivery import Delivery
from agent_core.store.embedded import EmbeddedValkey
from agent_core.store.lease import Lease, run_under_lease
from agent_core.store.pacing import Pacer
from agent_core.tools.shell import make_undumpable
from agent_core.worker import Worker, worker_name
from bots.gateway_watch import watch_gateways
from bots.settings import Settings
from channels.base import Channel, ChannelDeps
from channels.web import channel as web_channel
from channels.web.guard import SECURITY_HEADERS, Gate, secured
from channels.web.outbox import LocalOutbox

log = logging.getLogger(__name__)

ROLES = ("all", "web", "worker", "gateway", "chat")


def _open(scope: Any) -> Response | None:
    """The gate of a route every host name may reach."""
    return None


@dataclass
class Summary:
    redis: str = ""
    llm: str = ""
    llm_warning: str = ""  # the demo model on a deployment (Settings.demo_in_earnest)
    channels: list[tuple[str, bool, str]] = field(default_factory=list)
    role: str = ""
    url: str = ""


def protect_secrets(shell_enabled: bool) -> None:
    """Before any tool can run: this process's /proc files (its environment, with
    every token and key) become readable by root only, not by a shell command
    running as the same user (:func:`make_undumpable`)."""
    undumpable = make_undumpable()
    if shell_enabled and hasattr(os, "geteuid") and os.geteuid() == 0:
        log.warning(
            "ENABLE_SHELL_TOOL=true while Parley runs as root: a command can read Parley's "
            "tokens and keys (/proc/<pid>/environ, its files). Run Parley as a non-root "
            "user, or in a container or sandbox of its own"
        )
    elif shell_enabled and not undumpable:
        log.warning(
            "ENABLE_SHELL_TOOL=true: could not make this process non-dumpable (not Linux?); "
            "a command may be able to read Parley's environment"
        )


def build_llm(settings: Settings, clients: RedisClients | None) -> LLMProvider:
    from agent_core.llm.factory import build_provider

    return build_provider(settings.llm, clients.redis if clients else None)


def describe_llm(settings: Settings) -> str:
    from agent_core.llm.factory import describe

    return describe(settings.llm)


class Runtime:
    def __init__(
        self, settings: Settings, role: str = "all", *, llm: LLMProvider | None = None
    ) -> None:
        if role not in ROLES:
            raise ConfigError(
                [f"role: unknown process role {role!r}; use one of {', '.join(ROLES)}"]
            )
        self.settings = settings
        self.role = role
        self.embedded: EmbeddedValkey | None = None
        self.clients: RedisClients | None = None
        self.llm: LLMProvider | None = llm
        self._llm_given = llm is not None
        self.channels: dict[str, Channel] = {}
        self.outboxes: dict[str, Outbox] = {}
        self.ingest: Ingest | None = None
        self.delivery: Delivery | None = None
        self.worker: Worker | None = None
        self.agent: Agent | None = None
        self.proactive: Proactive | None = None
        self._menu_task: asyncio.Task[None] | None = None
        self.summary = Summary(role=role)
        self.started_at = time.time()
        self.draining = False
        self.crashed = False  # a task of this role ended before stop (see serve)
        self._deadline: float | None = None  # when the shutdown must be over (see serve)

    # -- properties ---------------------------------------------------------
    @property
    def runs_worker(self) -> bool:
        return self.role in ("all", "worker", "chat")

    @property
    def runs_web(self) -> bool:
        return self.role in ("all", "web")

    @property
    def runs_gateway(self) -> bool:
        return self.role in ("all", "gateway")

    # -- lifecycle ----------------------------------------------------------
    async def __aenter__(self) -> Runtime:
        try:
            await self._start()
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()

    async def _start(self) -> None:
        await self._connect()
        assert self.clients is not None
        try:
            await self._build()
        except ResponseError as exc:  # e.g. the server filled up since the probe
            problem = refused(self.clients.url, exc)
            if problem is None:
                raise
            raise problem from None

    async def _connect(self) -> None:
        core = self.settings.core
        protect_secrets(core.enable_shell_tool)
        if core.redis_url is not None:
            url = core.redis_url.get_secret_value()
            self.clients = make_clients(
                url, tls_insecure=core.redis_tls_insecure, **core.pool_caps()
            )
            await check_reachable(self.clients)
            self.summary.redis = redact_url(url)
        else:
            self.settings.require_shared_redis()  # not one private Redis per dyno
            self.embedded = EmbeddedValkey(core.parley_data_dir, watch=True)
            starting = asyncio.ensure_future(self.embedded.start())
            try:
                await asyncio.shield(starting)  # a thread starts it: let it finish
            except asyncio.CancelledError:  # SIGTERM during start-up: leave nothing running
                with contextlib.suppress(Exception):
                    await starting
                await self.embedded.stop()
                raise
            self.clients = make_clients(self.embedded.url, **core.pool_caps())
            await check_reachable(self.clients)
            self.summary.redis = self.embedded.describe()
        await check_writable(self.clients)

    async def _build(self) -> None:
        core = self.settings.core
        assert self.clients is not None
        redis = self.clients.redis
        pacer = Pacer(redis)
        self.ingest = Ingest(
            redis, dedup_ttl_secs=core.dedup_ttl_secs, stream_maxlen=core.stream_maxlen
        )
        # agent core (issue 4): /interrupt flags a busy thread before it is queued
        self.ingest.add_filter(interrupt_filter(redis))
        # proactive (issue 12): event-triggered routines watch what comes in (never refuse),
        # from the people the worker would answer (its access rules, checked quietly)
        self.ingest.add_filter(
            EventTriggers(redis, RoutineStore(redis), access=AccessControl(redis, core))
        )
        self.delivery = Delivery(
            redis,
            self.clients.blocking,
            lock_ttl_ms=int(core.lock_ttl_secs * 1000),
            seen_ttl_ms=core.dedup_ttl_secs * 1000,
            session_ttl_ms=core.session_idle_ttl_secs * 1000,
        )
        await self.delivery.ensure_group()

        # channels
        deps = ChannelDeps(
            redis=redis,
            pacer=pacer,
            public_url=core.public_url.rstrip("/"),
            group_reply=core.group_reply,
        )
        status = self.settings.platform_status()
        for name, (on, why) in status.items():
            self.summary.channels.append((name, on, why))
            if on:
                mod = self.settings.modules[name]
                self.channels[name] = mod.create(self.settings.platforms[name], deps)
        web_on, web_why = web_channel.status(
            self.settings.web,
            [name for name, (on, _) in status.items() if on],
            hosted=self.settings.hosted,
            incomplete=self.settings.incomplete_platforms(),
        )
        if self.role == "chat":
            web_on, web_why = False, "not served by `parley chat`"
        self.summary.channels.append(("web", web_on, web_why))
        web = web_channel.create(self.settings.web, deps)
        web.use_blocking_client(self.clients.blocking)
        if web_on:
            self.channels["web"] = web
        for ch in self.channels.values():
            await ch.initialize()
        self.outboxes = {name: ch.outbox() for name, ch in self.channels.items()}
        # Answers to the local channels can be written by any worker, enabled here or not.
        self.outboxes.setdefault("web", LocalOutbox(redis, "web"))
        self.outboxes["console"] = LocalOutbox(redis, "console", stream_interval=None)

        # LLM + agent + worker
        if self.runs_worker:
            if self.llm is None:
                self.llm = build_llm(self.settings, self.clients)
            self.summary.llm = describe_llm(self.settings) if not self._llm_given else self.llm.name
            if not self._llm_given:
                self.summary.llm_warning = self.settings.demo_in_earnest()
            await self.llm.initialize()
            self.agent = Agent(core, self.llm, self.delivery, self.outboxes)
            await self.agent.initialize()  # model window check, profiles, tool clients
            self.worker = Worker(core, self.delivery, self.agent)
            # proactive (issue 12): routines, heartbeat, notifications (one scheduler leads)
            self.proactive = Proactive(
                core, self.agent, self.ingest, owner=self.worker.name, tenants=self._tenants()
            )
        if self.runs_web or self.runs_gateway:  # the processes people's messages reach
            menu = (self.agent.commands if self.agent else builtin_commands()).menu()
            self._menu_task = asyncio.create_task(self._publish_commands(menu), name="menus")

    async def _publish_commands(self, menu: list[tuple[str, str, str]]) -> None:
        """Platform command menus, in the background: a slow platform API never holds
        up the start, and a failure is the channel's log line, never a crash."""
        for ch in list(self.channels.values()):
            try:
                await ch.publish_commands(menu)
            except Exception:
                log.warning("%s: could not publish the command menu", ch.name, exc_info=True)

    def _tenants(self) -> dict[str, str]:
        """Tenants a notification target may leave out (the Telegram bot id)."""
        tg = self.settings.platforms.get("telegram")
        bot_id = getattr(tg, "bot_id", "") if tg is not None else ""
        return {"telegram": bot_id} if bot_id else {}

    def _step(self) -> float:
        """Seconds the next shutdown step may take: SHUTDOWN_STEP_SECS, less once the
        shutdown's deadline (set when serve stops) is near."""
        if self._deadline is None:
            return SHUTDOWN_STEP_SECS
        return min(SHUTDOWN_STEP_SECS, self._deadline - time.monotonic())

    async def _stop(self) -> None:
        if self._menu_task is not None:
            self._menu_task.cancel()
            await asyncio.gather(self._menu_task, return_exceptions=True)
            self._menu_task = None
        if self.agent is not None:
            await bounded(self.agent.shutdown(), "the agent's shutdown", self._step())
        for ch in list(self.channels.values()):
            await bounded(ch.shutdown(), f"{ch.name}'s shutdown", self._step())
        if self.llm is not None and not self._llm_given:
            await bounded(self.llm.shutdown(), "the LLM client's shutdown", self._step())
        if self.clients is not None:
            await bounded(self.clients.close(), "closing the Redis connections", self._step())
            self.clients = None
        if self.embedded is not None:
            await self.embedded.stop()
            self.embedded = None

    # -- the web app --------------------------------------------------------
    def web_app(self) -> Starlette:
        assert self.ingest is not None
        web = self.channels.get("web")
        # Where the chat is served, the 404/405 answers get its host check (a
        # DNS-rebound page must not probe them); /metrics answers a scraper by any Host
        # (parley:8000, parley.default.svc) but a browser only as the chat would (no
        # other site's page, no rebound name); /healthz and /readyz answer any Host (a
        # platform's health check may use any). All get the security headers.
        gate: Gate = _open
        metrics_gate: Gate = _open
        if isinstance(web, web_channel.WebChannel):
            gate, metrics_gate = web.gate, web.metrics_gate
        routes: list[BaseRoute] = [
            Route("/healthz", secured(self._healthz, _open), methods=["GET"]),
            Route("/readyz", secured(self._readyz, _open), methods=["GET"]),
        ]
        core = self.settings.core
        if core.metrics_enabled:  # METRICS_ENABLED=false: no route, so 404
            if core.metrics_token is not None:  # and then only with the token (401)
                metrics_gate = self._token_gate(core.metrics_token.get_secret_value(), metrics_gate)
            routes.append(Route("/metrics", secured(self._metrics, metrics_gate), methods=["GET"]))
        for ch in self.channels.values():
            routes.extend(ch.routes(self.ingest))
        if "web" not in self.channels:
            routes.append(Route("/", self._index, methods=["GET"]))

        async def no_route(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            response = gate(request.scope) or PlainTextResponse(
                exc.detail, status_code=exc.status_code, headers=exc.headers
            )
            response.headers.update(SECURITY_HEADERS)
            return response

        return Starlette(routes=routes, exception_handlers={404: no_route, 405: no_route})

    @staticmethod
    def _token_gate(token: str, browser_gate: Gate) -> Gate:
        """``browser_gate`` (another site's page: 403), then METRICS_TOKEN (401)."""
        from bots.metrics import TokenGate, short_token

        if problem := short_token(token):
            log.warning("%s; anyone who guesses it can read /metrics", problem)
        token_gate = TokenGate(token)

        def gate(scope: Any) -> Response | None:
            return browser_gate(scope) or token_gate(scope)

        return gate

    async def _index(self, request: Request) -> Response:
        return PlainTextResponse(
            "Parley is running. The local web chat is off here "
            "(set WEB_CHAT_ENABLED=true to serve it).\n"
        )

    async def _metrics(self, request: Request) -> Response:
        from bots.metrics import render

        assert self.clients is not None
        await self._flush_metrics()
        gauges = {"parley_draining": float(self.draining)}
        for name, ch in self.channels.items():
            if ch.has_gateway:  # one EXISTS each: is a process connected for it?
                with contextlib.suppress(RedisError, OSError):
                    up = await self.clients.redis.exists(keys.lease(f"gateway:{ch.gateway_lease}"))
                    gauges[f"parley_gateway_up|channel={name}"] = float(bool(up))
        body = await render(self.clients.redis, gauges)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def _flush_metrics(self) -> None:
        """The metrics, and the spend counted with no budget limit set.  Bounded only
        while the process drains or shuts down (the shutdown has a deadline); a
        periodic flush runs to its end, so a slow reply is not cut off after Redis
        has added the amounts (a cut-off flush keeps them for the next one)."""
        if self.clients is None:
            return
        bound = self._step() if self.draining or self._deadline is not None else None
        try:
            await asyncio.wait_for(self._flush_metrics_now(), bound)
        except TimeoutError:
            (log.warning if self.draining else log.debug)(
                "metrics flush: no answer from Redis in time; skipped"
            )
        except (RedisError, OSError) as exc:
            log.debug("metrics flush failed: %s", type(exc).__name__)

    async def _flush_metrics_now(self) -> None:
        assert self.clients is not None
        await METRICS.flush(self.clients.redis)
        if self.agent is not None:
            await self.agent.budget.flush()

    async def _metrics_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 5.0)
            await self._flush_metrics()

    async def _run_gateway(self, ch: Channel, stop: asyncio.Event) -> None:
        """Run the channel's gateway while holding its lease (one holder across
        processes); a lost lease stops it within the lease's margin, then waits."""
        assert self.clients is not None and self.ingest is not None
        redis, ingest = self.clients.redis, self.ingest

        def lease() -> Lease:
            return Lease(redis, f"gateway:{ch.gateway_lease}", worker_name(), ttl=15.0)

        async def run(inner: asyncio.Event) -> None:
            log.info("gateway %s: lease acquired, connecting", ch.name)
            await ch.run_gateway(ingest, inner)
            if not inner.is_set():  # neither stopping nor the lease lost
                # a process whose gateway ended looks alive and hears nothing: a crash
                raise GatewayEnded(f"the {ch.name} gateway ended by itself")

        await run_under_lease(lease, run, stop)

    async def _healthz(self, request: Request) -> Response:
        return JSONResponse(
            {"ok": True, "role": self.role, "uptime_s": round(time.time() - self.started_at)}
        )

    async def _readyz(self, request: Request) -> Response:
        problems: list[str] = []
        if self.draining:
            problems.append("shutting down")
        try:
            assert self.clients is not None
            await asyncio.wait_for(self.clients.redis.ping(), SHUTDOWN_STEP_SECS)
        except (RedisError, OSError, AssertionError, TimeoutError):
            problems.append("redis unreachable")
        if self.runs_worker and (self.worker is None or not self.worker.ready):
            problems.append("worker not consuming")
        if problems:
            return JSONResponse({"ready": False, "problems": problems}, status_code=503)
        return JSONResponse({"ready": True})

    # -- running --------------------------------------------------------------
    async def serve(
        self,
        stop: asyncio.Event,
        *,
        host: str,
        port: int,
        sockets: list[socket.socket] | None = None,
    ) -> None:
        """Run this process's role until ``stop`` is set, then drain.  ``sockets``:
        already listening (:func:`listen_on`), else uvicorn binds host:port."""
        freeze_startup_objects()
        tasks: list[asyncio.Task[Any]] = []
        server = None
        if self.runs_worker and self.worker is not None:
            tasks.append(asyncio.create_task(self.worker.run(stop), name="worker"))
        if self.runs_gateway:
            for ch in self.channels.values():
                if ch.has_gateway:
                    tasks.append(
                        asyncio.create_task(self._run_gateway(ch, stop), name=f"gateway-{ch.name}")
                    )
        tasks.append(asyncio.create_task(self._metrics_loop(stop), name="metrics"))
        if self.role == "worker" and self.clients is not None:
            # no gateway here: say so when no process holds one (bots/gateway_watch.py)
            leases = {n: ch.gateway_lease for n, ch in self.channels.items() if ch.has_gateway}
            if leases:
                watch = watch_gateways(
                    self.clients.redis, leases, stop, on_heroku=self.settings.on_heroku
                )
                tasks.append(asyncio.create_task(watch, name="gateway-watch"))
        if self.proactive is not None and self.role in ("all", "worker"):
            tasks.append(asyncio.create_task(self.proactive.run(stop), name="scheduler"))
        if self.runs_web:
            server = make_server(
                self.web_app(), host, port, keepalive_secs=self.settings.core.web_keepalive_secs
            )
            tasks.append(asyncio.create_task(server.serve(sockets=sockets), name="web"))
        await self._until_stop_or_crash(stop, tasks)
        self.draining = True
        if self.embedded is not None:
            self.embedded.stopping()  # a server gone now is not started again
        # one deadline for the whole shutdown, inside the platform's kill (Heroku:
        # SIGKILL 30 s after SIGTERM; SHUTDOWN_GRACE_SECS 20 + 5)
        self._deadline = time.monotonic() + self.settings.core.shutdown_grace_secs + 5
        web = self.channels.get("web")
        if isinstance(web, web_channel.WebChannel):
            web.close_streams()
        if server is not None:
            server.should_exit = True
        _, late = await asyncio.wait(tasks, timeout=max(self._deadline - time.monotonic(), 0.1))
        if late:
            log.warning(
                "shutdown: %s still running at the deadline (Redis not answering?); stopping them",
                ", ".join(t.get_name() for t in late),
            )
            for t in late:
                t.cancel()
            await asyncio.wait(late, timeout=1.0)
        results = [t.exception() if t.done() and not t.cancelled() else None for t in tasks]
        for t, r in zip(tasks, results, strict=True):
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                log.error("%s stopped with %s: %s", t.get_name(), type(r).__name__, r)
        await self._flush_metrics()  # what the drained turns counted (their spend too)

    async def _until_stop_or_crash(
        self, stop: asyncio.Event, tasks: list[asyncio.Task[Any]]
    ) -> None:
        """Wait for ``stop``.  A task of this role that fails first (worker, web
        server, gateway) is a crash: log it, stop everything, and make the
        process exit non-zero so its supervisor restarts it.  A task that just
        returns (a scheduler that is switched off) is not."""
        stopped = asyncio.create_task(stop.wait(), name="stop")
        waiting: set[asyncio.Task[Any]] = {stopped, *tasks}
        try:
            while not stop.is_set():
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                failed = [t for t in done if not t.cancelled() and t.exception() is not None]
                for t in failed:
                    log.critical(
                        "%s stopped unexpectedly (%r); shutting this process down so it is "
                        "restarted",
                        t.get_name(),
                        t.exception(),
                    )
                if failed:
                    self.crashed = True
                    stop.set()
        finally:
            stopped.cancel()


class GatewayEnded(RuntimeError):
    """A platform's gateway (polling, a socket) returned while it should run."""


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (modules, SDK clients, settings: a few
    hundred thousand objects) out of the garbage collector's view.

    Measured (bench/README.md, hot spot 8): without it every full collection
    walked them all and paused the process for 50-75 ms about every 3 s at 100
    turns/s, which was the whole p99 of added latency.  These objects live as
    long as the process, so there is nothing to collect among them.
    """
    gc.collect()
    gc.freeze()


def check_port_free(host: str, port: int) -> None:
    """Whether ``listen_on`` would succeed (binds, then lets go)."""
    for sock in listen_on(host, port):
        sock.close()


def listen_on(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address HOST resolves to (IPv4 or IPv6), handed to
    uvicorn as they are: the port is held from this check on, so a second process
    started at the same moment fails here, with one line, not inside the server.

    A HOST that does not resolve, or is no address of this machine, is reported as
    HOST; a port in use or not allowed as PORT."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else "not a host name"
        raise ConfigError(
            [f"HOST: cannot resolve {host!r} ({reason}); use an address such as 127.0.0.1 or ::1"]
        ) from None
    socks: list[socket.socket] = []
    # An IPv6 socket takes IPv4 clients too unless HOST also gave an IPv4 address
    # (then that one has its own socket): HOST=:: serves both, as it does elsewhere.
    v4_too = any(family == socket.AF_INET for family, *_ in infos)
    for family, kind, proto, _, addr in dict.fromkeys(infos):
        try:
            s = socket.socket(family, kind, proto)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if v4_too else 0)
            s.bind(addr)
            s.listen(2048)
        except OSError as exc:
            for opened in socks:
                opened.close()
            why = exc.strerror or str(exc)
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                raise ConfigError(
                    [f"HOST: cannot listen on {host} ({why}); use an address of this machine"]
                ) from None
            where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            raise ConfigError(
                [f"PORT: cannot listen on {where} ({why}); set PORT to a free port"]
            ) from None
    return socks


def make_server(app: Starlette, host: str, port: int, *, keepalive_secs: int = 95) -> Any:
    """uvicorn on the runtime's loop.  Idle keep-alive connections stay open longer
    than a proxy keeps them (Heroku's router: 90 s), so the proxy, not Parley, closes
    them: a server that closes first races a request the proxy is sending on that
    connection, which then fails (a webhook the platform has to deliver again)."""
    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def]
            yield  # the runtime owns SIGTERM / SIGINT

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=keepalive_secs,
    )
    return _Server(config)
