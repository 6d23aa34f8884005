"""The `parley` command line (typer + rich).

Every failure a user can cause (bad settings, unreachable Redis, port in use)
ends with one clear line per problem on stderr and exit code 2, never a
traceback.  SIGTERM, like Ctrl-C, stops any command cleanly, during start-up
too (the embedded Valkey a command started is stopped with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from agent_core import __version__
from agent_core.errors import ConfigError
from bots import event_loop as loops
from bots.logs import setup_logging
from bots.runtime import ROLES, Runtime, listen_on
from bots.settings import Settings, early_log_settings, load_settings

app = typer.Typer(
    name="parley",
    help="Parley: one AI agent in Telegram, Slack, Discord and a local web chat.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# soft_wrap: a line longer than the console (80 columns when stderr is a file, as on
# Heroku) stays one line in the log
err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)
log = logging.getLogger("parley")


# LOG_FORMAT=json: every line Parley writes for the operator (start-up summary,
# problems, "stopping", "stopped") is a log record, one JSON object per line
_logs = {"json": False}


def _logging(level: str, fmt: str, secrets: list[str] | tuple[str, ...] = ()) -> None:
    setup_logging(level, fmt, secrets)
    # "parley" carries only those operator lines: printed in text mode whatever
    # LOG_LEVEL says, so not hidden by it with JSON either (its own level is what
    # decides; the records still go to the root's JSON handler)
    log.setLevel(logging.INFO)
    _logs["json"] = fmt == "json"


def _say(markup: str, level: int = logging.INFO) -> None:
    """One line for the operator: rich text on stderr, or a log record with JSON."""
    if _logs["json"]:
        log.log(level, Text.from_markup(markup).plain)
    else:
        err.print(markup)


def _fail(problems: list[str]) -> None:
    for p in problems:
        if _logs["json"]:
            log.error("%s", p)
        else:
            err.print(f"[bold red]parley:[/] {escape(p)}", markup=True, soft_wrap=True)
    raise typer.Exit(2)


def _settings() -> Settings:
    try:
        s = load_settings()
    except ConfigError as exc:
        _fail(exc.problems)
        raise  # unreachable
    _logging(s.core.log_level, s.core.log_format, s.secret_values())
    return s


class _Terminated(Exception):
    """SIGTERM arrived before the command installed its own handling."""


async def _cancel_on_sigterm(main: Callable[[], Awaitable[None]], stdin_thread: bool) -> None:
    """Run ``main`` so that SIGTERM cancels it, as asyncio.run does for Ctrl-C: the
    ``finally`` / ``async with`` clean-ups run (Runtime stops the embedded Valkey)
    instead of the process dying with everything it started.  `parley run`
    replaces the handler with its graceful stop once started."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    hits = {"n": 0}

    def on_sigterm() -> None:
        hits["n"] += 1
        if hits["n"] == 1:
            task.cancel()
        else:
            os._exit(143)

    # off the main thread: asyncio raises RuntimeError, uvloop ValueError
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        await main()
    except asyncio.CancelledError:
        if not hits["n"]:
            raise
        task.uncancel()
        if stdin_thread:
            # a thread blocked reading stdin would hold up asyncio.run's exit
            _say("[dim]stopped (SIGTERM)[/]")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(143)
        raise _Terminated from None


_STOP_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []),
)


def _restore_signals(before: dict[int, Any]) -> None:
    for sig, handler in before.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            with contextlib.suppress(ValueError, OSError, TypeError):  # not the main thread
                signal.signal(sig, handler)


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop for EVENT_LOOP: ``auto`` is uvloop when it can be imported
    (a dependency except on Windows), else asyncio's; None means asyncio's."""
    picked = loops.pick(choice)
    if picked is None:
        why = loops.uvloop_problem() or "not installed"
        _fail([f"EVENT_LOOP: uvloop is {why} (pip install uvloop; not on Windows)"])
    if picked != "uvloop":
        return None
    import uvloop

    return uvloop.new_event_loop


def _run_async(
    main: Callable[[], Awaitable[None]], *, stdin_thread: bool = False, event_loop: str = "asyncio"
) -> None:
    """``stdin_thread``: main may be blocked in a thread reading stdin, which cannot
    be interrupted, so after SIGTERM and the clean-up the process exits at once.
    ``event_loop``: the EVENT_LOOP setting (long-running commands pass it)."""
    # uvloop leaves its signal handlers in place when its loop closes (asyncio's loop
    # restores the defaults): without this, a process still ending (threads joining)
    # would ignore SIGTERM and Ctrl-C
    before = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    try:
        with asyncio.Runner(loop_factory=loop_factory(event_loop)) as runner:
            runner.run(_cancel_on_sigterm(main, stdin_thread))
    except ConfigError as exc:
        _fail(exc.problems)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except _Terminated:
        _say("[dim]stopped (SIGTERM)[/]")
        raise typer.Exit(143) from None
    finally:
        _restore_signals(before)


def _version(value: bool) -> None:
    if value:
        print(f"parley {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Without a command: `parley run` (everything in one process)."""
    level, fmt = early_log_settings()
    if fmt == "json":  # what loading the settings warns, as JSON too
        _logging(level, fmt)
    if ctx.invoked_subcommand is None:
        run("all")


def host_for(s: Settings) -> str:
    """HOST, else 0.0.0.0 on Heroku ($DYNO), else 127.0.0.1.  $PORT alone never
    opens the port to the network: other platforms set HOST=0.0.0.0."""
    if s.core.host:
        return s.core.host
    return "0.0.0.0" if s.on_heroku else "127.0.0.1"


def _shown_host(host: str) -> str:
    if host in ("127.0.0.1", "0.0.0.0", "::", "::1", ""):
        return "localhost"
    return f"[{host}]" if ":" in host else host


def _loop_name() -> str:
    module = type(asyncio.get_running_loop()).__module__.split(".")[0]
    return "uvloop" if module == "uvloop" else "asyncio"


def print_summary(rt: Runtime, host: str, port: int) -> None:
    sm = rt.summary
    _say(f"[bold]Parley {__version__}[/] — process role: [bold]{rt.role}[/]")
    _say(f"  redis:    {escape(sm.redis)}")
    _say(f"  loop:     {_loop_name()}")
    if sm.llm:
        _say(f"  llm:      {escape(sm.llm)}")
    if sm.llm_warning:
        _say(f"  [yellow]warning:[/] {escape(sm.llm_warning)}", logging.WARNING)
    for name, on, why in sm.channels:
        if name == "web" and not rt.runs_web:
            # the web chat's status is the web process's: here, at most its replies
            mark = "replies only" if rt.runs_worker else "[dim]off[/]"
            _say(f"  {name + ':':10}{mark} (no HTTP in this role)")
            continue
        mark = "[green]on[/]" if on else "[dim]off[/]"
        ch = rt.channels.get(name)
        if on and ch is not None and ch.has_gateway and not rt.runs_gateway:
            # heard only by a gateway process: not this one, whatever "on" suggests
            why += "; its connection runs in a gateway process, not here"
        _say(f"  {name + ':':10}{mark} ({escape(why)})")
    if rt.runs_web:
        chat = any(name == "web" and on for name, on, _ in sm.channels)
        what = "open it in a browser" if chat else "webhooks and /healthz; no web chat here"
        _say(f"  http:     http://{_shown_host(host)}:{port}/ ({what})")
    for name in rt.settings.plaintext_secrets:
        _say(
            f"  [yellow]warning:[/] {name} is read from the plaintext .env file; "
            f"prefer the environment or {name}_FILE",
            logging.WARNING,
        )


def _redacted(text: str, secrets: list[str]) -> str:
    for v in sorted(secrets, key=len, reverse=True):
        text = text.replace(v, "***")
    return text


def _install_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    hits = {"n": 0}

    def on_signal() -> None:
        hits["n"] += 1
        if hits["n"] == 1:
            stop.set()
            with contextlib.suppress(OSError):  # a terminal that hung up: EIO
                _say("[dim]stopping: finishing turns in hand (Ctrl-C again to force)…[/]")
        else:
            os._exit(130)

    signals = [signal.SIGTERM, signal.SIGINT]
    # SIGHUP: the terminal closed (an SSH session dropped): stop as cleanly; unless
    # it is ignored (nohup), which it must stay
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signals.append(signal.SIGHUP)
    for sig in signals:
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal)


@app.command()
def run(
    role: Annotated[str, typer.Argument(help="all | web | worker | gateway")] = "all",
) -> None:
    """Run Parley: `all` (default) runs web, worker and gateway in one process."""
    if role not in ROLES or role == "chat":
        _fail([f"unknown role {role!r}; use one of: all, web, worker, gateway"])
    s = _settings()
    host, port = host_for(s), s.core.port

    async def main() -> None:
        socks = listen_on(host, port) if role in ("all", "web") else None
        try:
            async with Runtime(s, role) as rt:
                print_summary(rt, host, port)
                stop = asyncio.Event()
                _install_signals(stop)
                await rt.serve(stop, host=host, port=port, sockets=socks)
        finally:
            for sock in socks or ():
                sock.close()
        if rt.crashed:
            _say("[red]stopped after a crash (see the log above)[/]", logging.ERROR)
            raise typer.Exit(1)
        _say("[dim]stopped[/]")

    _run_async(main, event_loop=s.core.event_loop)


@app.command()
def chat() -> None:
    """Chat in the terminal. With piped input: one message per line, answers on stdout."""
    from channels.console.chat import ConsoleChat, run_console

    s = _settings()
    if not sys.stdin.isatty():
        logging.getLogger().setLevel(max(logging.WARNING, logging.getLogger().level))

    async def main() -> None:
        async with Runtime(s, "chat") as rt:
            if sys.stdin.isatty():
                print_summary(rt, "", 0)
            stop = asyncio.Event()
            assert rt.worker is not None and rt.clients is not None and rt.ingest is not None
            worker = asyncio.create_task(rt.worker.run(stop))
            try:
                console = ConsoleChat(rt.clients.redis, rt.clients.blocking, rt.ingest)
                await run_console(console)
            finally:
                stop.set()
                await worker

    _run_async(main, stdin_thread=True, event_loop=s.core.event_loop)


@app.command()
def doctor() -> None:
    """Check settings, Redis, platform tokens, the Telegram webhook and the LLM."""
    from rich.table import Table

    from bots.ops import doctor as run_doctor

    s = _settings()
    try:
        s.require_shared_redis()  # refused as `parley run` and `parley release` refuse it
    except ConfigError as exc:
        _fail(exc.problems)
    out = Console(highlight=False, emoji=False)  # "openai:m: …" is no emoji code

    async def main() -> None:
        checks = await run_doctor(s)
        secrets = s.secret_values()  # an error may quote a URL with its credentials
        table = Table(title="parley doctor", show_lines=False)
        table.add_column("check")
        table.add_column("status")
        table.add_column("detail")
        table.add_column("how to fix")
        for c in checks:
            table.add_row(
                c.name,
                ("[yellow]warning[/]" if c.warning else "[green]OK[/]")
                if c.ok
                else "[red]problem[/]",
                escape(_redacted(c.detail, secrets)),
                escape(_redacted(c.fix, secrets)),
            )
        if _logs["json"]:
            for c in checks:
                status = ("warning" if c.warning else "OK") if c.ok else "problem"
                fix = f"; {c.fix}" if c.fix else ""
                log.log(
                    logging.INFO if c.ok and not c.warning else logging.WARNING,
                    "doctor: %s: %s: %s%s",
                    c.name,
                    status,
                    _redacted(c.detail, secrets),
                    _redacted(fix, secrets),
                )
        else:
            out.print(table)
        if not all(c.ok for c in checks):
            raise typer.Exit(1)

    _run_async(main)


@app.command()
def release() -> None:
    """Release phase (Heroku): validate settings and Redis, register the Telegram webhook."""
    from bots.ops import release as run_release

    s = _settings()

    async def main() -> None:
        for line in await run_release(s):
            if _logs["json"]:
                log.info("release: %s", line)
            else:
                print(line)

    _run_async(main)


@app.command()
def bench(
    scenario: Annotated[
        str,
        typer.Argument(
            help="floor | turns | inflight | redis | sessions | stream | all | chaos | stages"
        ),
    ],
    quick: Annotated[bool, typer.Option(help="a tiny configuration that runs in seconds")] = False,
    rate: Annotated[float, typer.Option(help="turns/s of the fixed-rate phase")] = 100.0,
    duration: Annotated[float, typer.Option(help="seconds per measured phase")] = 10.0,
    rounds: Annotated[
        int, typer.Option(help="turns: alternating fixed-rate rounds per system (median)")
    ] = 3,
    users: Annotated[int, typer.Option(help="closed-loop users at saturation")] = 64,
    floor_pool: Annotated[
        str, typer.Option(help="floor Bot connection pool sizes, e.g. 1,64 (last = compared)")
    ] = "64",
    llm_latency: Annotated[float, typer.Option(help="inflight: fake LLM seconds")] = 2.0,
    target: Annotated[int, typer.Option(help="inflight: concurrent turns to reach")] = 5000,
    worker_concurrency: Annotated[
        int, typer.Option(help="inflight: the worker's WORKER_CONCURRENCY (0 = target + 500)")
    ] = 0,
    sessions: Annotated[
        str, typer.Option(help="sessions: stored-session counts")
    ] = "1000,100000,1000000",
    out: Annotated[str, typer.Option(help="results directory (default bench/results)")] = "",
) -> None:
    """Benchmarks on loopback against the fakes (from a source checkout)."""

    import bots

    root = Path(bots.__file__).resolve().parents[1]
    if not (root / "bench" / "scenarios.py").is_file():
        _fail([f"bench: needs a source checkout (no bench/ under {root})"])
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from bench.scenarios import DIAGNOSTICS, SCENARIOS, Options
    from bench.scenarios import run as run_scenario

    if scenario == "chaos":
        _bench_chaos(quick, Path(out) if out else root / "bench" / "results")
        return
    names = list(SCENARIOS[1:]) if scenario == "all" else [scenario]
    if any(n not in SCENARIOS + DIAGNOSTICS for n in names):
        known = ", ".join((*SCENARIOS, "all", "chaos", *DIAGNOSTICS))
        _fail([f"unknown scenario {scenario!r}; use one of: {known}"])
    try:
        opts = Options(
            quick=quick,
            rate=rate,
            duration=duration,
            rounds=rounds,
            users=users,
            floor_pools=tuple(int(x) for x in floor_pool.split(",") if x),
            llm_latency=llm_latency,
            target=target,
            worker_concurrency=worker_concurrency,
            sessions=tuple(int(x) for x in sessions.split(",") if x),
        )
    except ValueError:
        _fail(["--floor-pool and --sessions take comma-separated integers"])
        raise  # unreachable
    logging.getLogger().setLevel(logging.WARNING)
    command = "parley bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else ""
    for name in names:
        try:
            run_scenario(name, opts, Path(out) if out else None, command=command)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except Exception as exc:
            _fail([f"bench {name}: {type(exc).__name__}: {exc}"])


def _bench_chaos(quick: bool, out_dir: Path) -> None:
    """The fault scenarios of tests/faults at their long sizes (--quick: CI sizes)."""
    import datetime as dt
    import json

    from bench.chaos import run as run_chaos

    result = asyncio.run(run_chaos(long=not quick))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dt.date.today().isoformat()}-chaos{'-quick' if quick else ''}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    failed = False
    for name, fig in result["scenarios"].items():
        if "error" in fig:
            failed = True
        shown = {k: v for k, v in fig.items() if k not in ("trace", "rerun")}
        typer.echo(f"{name}: {json.dumps(shown, default=str)}")
    typer.echo(f"wrote {path}")
    if failed:
        raise typer.Exit(1)


telegram_app = typer.Typer(help="Telegram webhook administration.", no_args_is_help=True)
app.add_typer(telegram_app, name="telegram")


def _telegram_settings(s: Settings) -> Any:
    if "telegram" not in s.platforms:
        _fail(["telegram: the channel is not available in this build"])
    return s.platforms["telegram"]


@telegram_app.command("set-webhook")
def telegram_set_webhook(
    drop_pending: Annotated[bool, typer.Option(help="drop updates queued at Telegram")] = False,
) -> None:
    """Register PUBLIC_URL/telegram/webhook with the secret token."""
    from channels.telegram import admin

    s = _settings()
    tg = _telegram_settings(s)
    if not s.core.public_url:
        _fail(["PUBLIC_URL: required to set the webhook (e.g. https://myapp.herokuapp.com)"])

    async def main() -> None:
        print(await admin.set_webhook(tg, s.core.public_url, drop_pending_updates=drop_pending))

    _run_async(main)


@telegram_app.command("delete-webhook")
def telegram_delete_webhook(
    drop_pending: Annotated[bool, typer.Option(help="drop updates queued at Telegram")] = False,
) -> None:
    """Remove the webhook (to use polling)."""
    from channels.telegram import admin

    tg = _telegram_settings(_settings())

    async def main() -> None:
        print(await admin.delete_webhook(tg, drop_pending_updates=drop_pending))

    _run_async(main)


@telegram_app.command("webhook-info")
def telegram_webhook_info() -> None:
    """Show what Telegram has registered."""
    from channels.telegram import admin

    tg = _telegram_settings(_settings())

    async def main() -> None:
        print(await admin.webhook_info(tg))

    _run_async(main)


# --- agent core (issue 4): pairing -----------------------------------------------
pairing_app = typer.Typer(
    help="Let people (DM_POLICY=pairing) or group chats (GROUP_POLICY=pairing) in "
    "that were given a pairing code."
)
app.add_typer(pairing_app, name="pairing")


async def _with_redis(fn: Callable[[Any], Awaitable[None]]) -> None:
    from agent_core.store.client import check_reachable, make_clients
    from agent_core.store.embedded import EmbeddedValkey

    s = _settings()
    embedded = None
    clients = None
    try:
        if s.core.redis_url is not None:
            clients = make_clients(
                s.core.redis_url.get_secret_value(),
                tls_insecure=s.core.redis_tls_insecure,
                **s.core.pool_caps(),
            )
        else:
            s.require_shared_redis()  # on Heroku: REDIS_URL or nothing
            embedded = EmbeddedValkey(s.core.parley_data_dir)
            start = asyncio.ensure_future(embedded.start())
            try:
                await asyncio.shield(start)
            except asyncio.CancelledError:
                # SIGTERM: let the start finish, so the stop below finds the server
                with contextlib.suppress(Exception):
                    await start
                raise
            clients = make_clients(embedded.url, **s.core.pool_caps())
        await check_reachable(clients)
        await fn(clients.redis)
    finally:
        if clients is not None:
            await clients.close()
        if embedded is not None:
            await embedded.stop()


@pairing_app.command("list")
def pairing_list() -> None:
    """Pending pairing requests: people (code, user) and group chats (code, chat, who asked)."""
    from agent_core.agent.access import list_pairings
    from agent_core.events import CHANNELS

    async def go(redis: Any) -> None:
        rows = await list_pairings(redis, CHANNELS)
        if not rows:
            print("no pending pairing requests")
        for r in rows:
            name = f" ({r['name']})" if r.get("name") else ""
            if r.get("kind") == "chat":
                print(f"{r['code']}  group chat {r['chat']}  (asked by {r['user']}{name})")
            else:
                print(f"{r['code']}  {r['user']}{name}")

    _run_async(lambda: _with_redis(go))


@pairing_app.command("approve")
def pairing_approve(
    code: Annotated[str, typer.Argument(help="the 8-character code the user or chat was given")],
) -> None:
    """Let the person, or the group chat, that got CODE talk to the bot (the code works once)."""
    from agent_core.agent.access import approve_pairing

    async def go(redis: Any) -> None:
        rec = await approve_pairing(redis, code)
        if rec is None:
            _fail([f"pairing code {code.strip().upper()!r} is unknown or expired"])
            return
        if rec.get("kind") == "chat":
            print(f"approved group chat {rec['chat']}; everyone in it can talk to the bot now")
            return
        print(f"approved {rec['user']}; they can write to the bot now")

    _run_async(lambda: _with_redis(go))


# --- proactive (issue 12): routines ------------------------------------------------
routines_app = typer.Typer(help="Routines: scheduled, event-triggered and manual jobs.")
app.add_typer(routines_app, name="routines")


def _routine_store(redis: Any) -> Any:
    from agent_core.proactive.routines import RoutineStore

    return RoutineStore(redis)


def _plain(markdown: str) -> str:
    return markdown.replace("**", "").replace("`", "")


@routines_app.command("list")
def routines_list() -> None:
    """Every routine, its trigger and its last run."""
    from agent_core.proactive.commands import list_text

    async def go(redis: Any) -> None:
        print(_plain(await list_text(_routine_store(redis))))

    _run_async(lambda: _with_redis(go))


@routines_app.command(
    "add", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def routines_add(ctx: typer.Context) -> None:
    """NAME (--cron 'EXPR' [--tz Z] | --event REGEX [--channel C] [--cooldown S] [--max N]
    [--dedup S] | --manual) [--full] --notify TARGET PROMPT..."""
    from agent_core.proactive.routines import RoutineError, parse_add, validate

    s = _settings()
    try:
        r = validate(
            parse_add(list(ctx.args), created_by="cli", default_tz=s.core.routine_timezone)
        )
    except RoutineError as exc:
        _fail([f"routine not added: {exc}"])
        return

    async def go(redis: Any) -> None:
        if not await _routine_store(redis).add(r):
            _fail([f"routine not added: a routine named {r.name!r} exists (remove it first)"])
        print(f"added routine {r.name}: {_plain(r.describe_trigger())}, {r.action} -> {r.notify}")

    _run_async(lambda: _with_redis(go))


@routines_app.command("show")
def routines_show(name: Annotated[str, typer.Argument(help="the routine's name")]) -> None:
    """A routine, its next fire and its last runs."""
    from agent_core.proactive.commands import show_text

    async def go(redis: Any) -> None:
        text = await show_text(_routine_store(redis), name)
        if text.startswith("No routine"):
            _fail([_plain(text)])
        print(_plain(text))

    _run_async(lambda: _with_redis(go))


def _routine_action(name: str, action: str) -> None:
    async def go(redis: Any) -> None:
        store = _routine_store(redis)
        if action in ("pause", "resume"):
            ok = await store.set_enabled(name, action == "resume") is not None
        elif action == "remove":
            ok = await store.remove(name)
        else:
            ok = await store.get(name) is not None
            if ok:
                await store.queue_run(name.strip().lower(), "manual")
        if not ok:
            _fail([f"no routine named {name!r}"])
        done = {"pause": "paused", "resume": "resumed", "remove": "removed"}
        print(f"routine {name} {done.get(action, 'queued (a running worker runs it)')}")

    _run_async(lambda: _with_redis(go))


@routines_app.command("pause")
def routines_pause(name: Annotated[str, typer.Argument()]) -> None:
    """Stop firing it (manual runs still work)."""
    _routine_action(name, "pause")


@routines_app.command("resume")
def routines_resume(name: Annotated[str, typer.Argument()]) -> None:
    """Fire it again."""
    _routine_action(name, "resume")


@routines_app.command("remove")
def routines_remove(name: Annotated[str, typer.Argument()]) -> None:
    """Delete it and its history."""
    _routine_action(name, "remove")


@routines_app.command("run")
def routines_run(name: Annotated[str, typer.Argument()]) -> None:
    """Queue one run now (the scheduler of a running worker runs it)."""
    _routine_action(name, "run")


def main(argv: list[str] | None = None) -> Any:
    return app(args=argv)


if __name__ == "__main__":
    main()
