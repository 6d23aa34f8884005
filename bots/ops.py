"""Operator commands: `parley doctor` and `parley release`.

Both build the same pieces the runtime builds, check them one by one, and report
a table of OK / problem / how to fix.  Neither prints a secret.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from agent_core.errors import ConfigError
from agent_core.llm import errors as llm_errors
from agent_core.llm.config import backend_config
from agent_core.llm.settings import PRESETS
from agent_core.store import keys
from agent_core.store.client import (
    RedisClients,
    check_reachable,
    check_writable,
    connections_per_process,
    make_clients,
    redact_url,
    server_max_clients,
)
from agent_core.store.embedded import EmbeddedValkey
from agent_core.store.pacing import Pacer
from bots import event_loop as loops
from bots.settings import Settings
from channels.base import ChannelDeps


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False  # ok, but worth a look (does not fail `parley doctor`)
    rejected: bool = False  # not ok: a setting was refused (not merely unreachable)


async def _redis(settings: Settings) -> tuple[RedisClients | None, EmbeddedValkey | None, Check]:
    core = settings.core
    embedded = None
    clients: RedisClients | None = None
    try:
        if core.redis_url is not None:
            url = core.redis_url.get_secret_value()
            clients = make_clients(url, tls_insecure=core.redis_tls_insecure, **core.pool_caps())
            where = redact_url(url)
        else:
            settings.require_shared_redis()  # on Heroku: REDIS_URL or nothing
            embedded = EmbeddedValkey(core.parley_data_dir)
            await embedded.start()
            clients = make_clients(embedded.url, **core.pool_caps())
            where = embedded.describe()
        await check_reachable(clients)
        await check_writable(clients)
    except ConfigError as exc:
        if clients is not None:
            with contextlib.suppress(Exception):
                await clients.close()
        if embedded is not None:
            await embedded.stop()
        return None, None, Check("redis", False, exc.problems[0], "fix REDIS_URL / PARLEY_DATA_DIR")
    try:
        t0 = time.perf_counter()
        await clients.redis.ping()
        rtt = (time.perf_counter() - t0) * 1000
        server = await clients.redis.info("server")
        persistence = await clients.redis.info("persistence")
        version = server.get("valkey_version") or server.get("redis_version") or "?"
        aof = int(persistence.get("aof_enabled", 0)) == 1
        rdb = persistence.get("rdb_last_bgsave_status", "?")
        durable = "AOF on" if aof else f"AOF off (RDB last save {rdb})"
        ok = True
        fix = ""
        if not aof and embedded is None:
            fix = "without AOF a Redis restart can lose the last seconds of queued messages"
        return (
            clients,
            embedded,
            Check("redis", ok, f"{where}: version {version}, ping {rtt:.1f} ms, {durable}", fix),
        )
    except RedisError as exc:
        return clients, embedded, Check("redis", False, f"{where}: {type(exc).__name__}", "")


# Processes counted against the server's connection limit: a web, a worker and one
# more (the release phase, or a one-off such as `heroku run parley doctor`); plus a
# gateway when a configured platform needs one (one gateway process serves them all).
COUNTED_PROCESSES = 3


def counted_processes(settings: Settings) -> tuple[int, str]:
    """(how many processes the connection check counts, which)."""
    if settings.gateway_platforms():
        return COUNTED_PROCESSES + 1, "a web, a worker, a gateway and one more process"
    return COUNTED_PROCESSES, "a web, a worker and one more process"


async def _connections(settings: Settings, clients: RedisClients) -> Check:
    """The server's maxclients against what the pools may open (REDIS_MAX_CONNECTIONS,
    REDIS_MAX_BLOCKING_CONNECTIONS): past it Redis refuses connections, and commands
    fail instead of waiting for a pooled one."""
    core = settings.core
    per = connections_per_process(core.redis_max_connections, core.redis_max_blocking_connections)
    processes, which = counted_processes(settings)
    need = processes * per
    caps = (
        f"each process may open {per:,} (REDIS_MAX_CONNECTIONS {core.redis_max_connections:,} "
        f"+ REDIS_MAX_BLOCKING_CONNECTIONS {core.redis_max_blocking_connections:,} + 1 shared)"
    )
    limit = await server_max_clients(clients.redis)
    if limit is None:
        return Check(
            "redis connections",
            True,
            f"the server's maxclients cannot be read (INFO and CONFIG say nothing); {caps}",
            "check that your Redis plan's connection limit covers every process "
            "(deploy/heroku.md, Redis connections)",
        )
    detail = f"the server accepts {limit:,}; {caps}; {which} (release, heroku run): {need:,}"
    if limit >= need:
        return Check("redis connections", True, f"{detail}; each further dyno adds {per:,}")
    return Check(
        "redis connections",
        False,
        detail,
        f"lower REDIS_MAX_CONNECTIONS and REDIS_MAX_BLOCKING_CONNECTIONS until every process "
        f"together stays within {limit:,}, or take a Redis plan with more connections "
        "(deploy/heroku.md, Redis connections)",
    )


def event_loop_check(settings: Settings) -> Check:
    """Which event loop `parley run` will use (EVENT_LOOP), and whether it can."""
    choice = settings.core.event_loop
    picked = loops.pick(choice)
    why = loops.uvloop_problem() if picked != "uvloop" else None
    if picked is None:
        return Check(
            "event loop",
            False,
            f"EVENT_LOOP=uvloop, but uvloop is {why}: `parley run` will refuse to start",
            "pip install uvloop (not on Windows), or EVENT_LOOP=auto",
        )
    if picked == "uvloop":
        return Check("event loop", True, f"uvloop {loops.uvloop_version()} (EVENT_LOOP={choice})")
    if choice == "asyncio":
        return Check("event loop", True, "asyncio (EVENT_LOOP=asyncio)")
    return Check("event loop", True, f"asyncio (uvloop is {why}; EVENT_LOOP=auto)")


async def doctor(settings: Settings) -> list[Check]:
    checks: list[Check] = [Check("settings", True, "all settings valid")]
    checks.append(event_loop_check(settings))
    for name in settings.plaintext_secrets:
        checks.append(
            Check(
                "settings",
                True,
                f"{name} comes from the plaintext .env",
                f"use {name}_FILE or the environment",
            )
        )
    if grace := grace_warning(settings):
        problem, _, fix = grace.partition("; ")
        checks.append(Check("shutdown", True, problem, fix, warning=True))
    if warning := metrics_warning(settings):
        problem, _, fix = warning.partition("; ")
        checks.append(Check("metrics", True, problem, fix, warning=True))
    clients, embedded, rc = await _redis(settings)
    checks.append(rc)
    try:
        if clients is not None and rc.ok:
            checks.append(await _connections(settings, clients))
        # platforms
        incomplete = settings.incomplete_platforms()
        for name, (on, why) in settings.platform_status().items():
            if not on:
                if name in incomplete:  # a bot token without the rest: off by mistake?
                    checks.append(Check(name, False, f"off: {why}", _incomplete_fix(name)))
                else:
                    checks.append(Check(name, True, f"off ({why})"))
                continue
            if clients is None:
                checks.append(Check(name, False, "not checked: Redis unavailable"))
                continue
            row, ch = await _platform_check(settings, name, clients)
            checks.append(row)
            if name == "telegram":
                checks.append(await _telegram_webhook(settings))
            lacking = getattr(ch, "missing_scopes", None)
            if lacking is not None:
                checks.append(
                    Check(
                        f"{name} scopes",
                        not lacking,
                        "; ".join(lacking) if lacking else "every scope Parley uses is granted",
                        "add them in OAuth & Permissions (or use the manifest in deploy/), "
                        "then reinstall the app"
                        if lacking
                        else "",
                    )
                )
        if clients is not None and rc.ok:
            checks.extend(await _gateways(settings, clients))
        # LLM
        checks.append(await _llm(settings, clients))
    finally:
        if clients is not None:
            await clients.close()
        if embedded is not None:
            await embedded.stop()
    return checks


async def _platform_check(
    settings: Settings, name: str, clients: RedisClients
) -> tuple[Check, Any]:
    """Start ``name``'s channel as every process does (its token checked) and stop it:
    (the row, the channel).  Not ok with ``rejected`` set: a process would refuse to
    start; not ok without it: the platform could not be reached (processes start)."""
    mod = settings.modules[name]
    deps = ChannelDeps(
        redis=clients.redis,
        pacer=Pacer(clients.redis),
        public_url=settings.core.public_url.rstrip("/"),
        group_reply=settings.core.group_reply,
    )
    ch = mod.create(settings.platforms[name], deps)
    try:
        await ch.initialize()
        if problem := getattr(ch, "unreachable", ""):  # started, not connected
            fix = getattr(ch, "unreachable_fix", "") or (
                f"check this machine's network (or {name.upper()}_API_BASE_URL)"
            )
            return Check(name, False, problem, fix), ch
        return Check(name, True, "token accepted"), ch
    except ConfigError as exc:
        fix = f"check the {name.upper()}_* settings"
        return Check(name, False, exc.problems[0], fix, rejected=True), ch
    except Exception as exc:
        return Check(name, False, f"{type(exc).__name__}", "see the log"), ch
    finally:
        with contextlib.suppress(Exception):
            await ch.shutdown()


def _incomplete_fix(name: str) -> str:
    if name == "slack":
        return (
            "set SLACK_SIGNING_SECRET (Events API) or SLACK_APP_TOKEN (Socket Mode), "
            "or unset SLACK_BOT_TOKEN"
        )
    return f"set the rest of the {name.upper()}_* settings, or unset {name.upper()}_BOT_TOKEN"


# Heroku sends SIGKILL this long after SIGTERM (a restart, a deploy, a scale down)
HEROKU_KILL_SECS = 30
# the runtime's shutdown deadline is SHUTDOWN_GRACE_SECS + this (bots/runtime.py)
SHUTDOWN_DRAIN_SECS = 5


def grace_warning(settings: Settings) -> str:
    """Why SHUTDOWN_GRACE_SECS is too long for Heroku's SIGKILL; "" when it is not
    (or when this is not a dyno)."""
    if not os.environ.get("DYNO"):
        return ""
    grace = settings.core.shutdown_grace_secs
    if grace + SHUTDOWN_DRAIN_SECS < HEROKU_KILL_SECS:
        return ""
    return (
        f"SHUTDOWN_GRACE_SECS={grace:g}: a process stops by {grace + SHUTDOWN_DRAIN_SECS:g} s "
        f"after SIGTERM, but Heroku kills it at {HEROKU_KILL_SECS} s, so turns in hand are "
        f"cut off instead of handed back; set SHUTDOWN_GRACE_SECS below "
        f"{HEROKU_KILL_SECS - SHUTDOWN_DRAIN_SECS}"
    )


def metrics_warning(settings: Settings) -> str:
    """Why /metrics is less private than it may look; "" when nothing is worth saying:
    on a dyno (the Common Runtime's web URL is on the internet) with no METRICS_TOKEN,
    anyone can read it; a short METRICS_TOKEN can be guessed.  Never the token."""
    core = settings.core
    if not core.metrics_enabled:
        return ""
    if core.metrics_token is not None:
        from bots.metrics import short_token

        return short_token(core.metrics_token.get_secret_value())
    if not os.environ.get("DYNO"):
        return ""
    return (
        "/metrics is public: on Heroku's Common Runtime anyone can read the counters, "
        "queue depths and model names; set METRICS_TOKEN (heroku config:set "
        "METRICS_TOKEN=$(openssl rand -hex 32)) and give it to your scraper, or "
        "METRICS_ENABLED=false (deploy/heroku.md, /metrics)"
    )


async def _gateways(settings: Settings, clients: RedisClients) -> list[Check]:
    """Whether a process holds each needed gateway connection now (its lease)."""
    out = []
    for name, line in zip(settings.gateway_platforms(), gateway_lines(settings), strict=True):
        lease = keys.lease(f"gateway:{settings.gateway_lease(name)}")
        try:
            holder = await clients.redis.get(lease)
        except (RedisError, OSError) as exc:
            out.append(Check(f"{name} gateway", False, f"not checked ({type(exc).__name__})"))
            continue
        if holder is not None:
            who = holder.decode() if isinstance(holder, bytes) else str(holder)
            out.append(Check(f"{name} gateway", True, f"connected by {who}"))
        else:
            fix = line.split(": needs a gateway process: ", 1)[1]
            # a warning, not a failure: a doctor run before the processes start is fine
            out.append(Check(f"{name} gateway", True, "no process holds it now", fix))
    return out


# a delivery error Telegram reported this recently means the webhook is failing now
RECENT_WEBHOOK_ERROR_SECS = 3600
# more updates than this waiting at Telegram: deliveries are not getting through
MANY_PENDING_UPDATES = 100


def _no_token(tg: Any, url: str) -> str:
    """A webhook URL as shown: an older bot's may hold the token in its path
    (python-telegram-bot's url_path=TOKEN recipe), and a password in its userinfo."""
    token = str(getattr(tg, "token", "") or "")
    shown = redact_url(url) if url else url
    return shown.replace(token, "<token>") if token else shown


async def _telegram_webhook(settings: Settings) -> Check:
    from channels.telegram import admin

    tg = settings.platforms["telegram"]
    public = settings.core.public_url
    mode = tg.resolved_mode(public)
    if mode == "webhook" and not public.startswith(("https://", "http://127.")):
        # set-webhook refuses it too: say what to change, not what to run
        return Check(
            "telegram webhook",
            False,
            f"PUBLIC_URL must be https:// (it is {public!r}); Telegram posts only to https",
            "set PUBLIC_URL to this app's https:// URL (or unset it to poll)",
        )
    try:
        info = await admin.webhook_status(tg)
    except ConfigError as exc:
        # the problem line says what is wrong and, after "; ", what to do
        detail, _, fix = exc.problems[0].partition("; ")
        return Check("telegram webhook", False, detail, fix or "check the TELEGRAM_* settings")
    registered = info.url
    if mode == "webhook":
        want = admin.webhook_url(public)
        if registered != want:
            return Check(
                "telegram webhook",
                False,
                f"registered {_no_token(tg, registered)!r}, expected {want!r}",
                "run `parley telegram set-webhook` (the release phase does it on Heroku)",
            )
        age = info.last_error_age_secs()
        if age is not None and age < RECENT_WEBHOOK_ERROR_SECS:
            return Check(
                "telegram webhook",
                False,
                f"registered at {want}, but Telegram's last delivery failed "
                f"{max(age, 0) / 60:.0f} min ago: {info.last_error_message or '(no message)'}; "
                f"{info.pending_update_count} update(s) pending",
                "check that the web process is up and answers at PUBLIC_URL, and that "
                "TELEGRAM_WEBHOOK_SECRET is the one the webhook was set with "
                "(`parley telegram set-webhook` sets it again)",
            )
        if info.pending_update_count > MANY_PENDING_UPDATES:
            return Check(
                "telegram webhook",
                True,
                f"registered at {want}; {info.pending_update_count} updates pending at Telegram",
                "deliveries are not keeping up: check the web process (`parley telegram "
                "webhook-info` shows Telegram's last error)",
                warning=True,
            )
        return Check("telegram webhook", True, f"registered at {want}")
    if registered:
        return Check(
            "telegram webhook",
            False,
            f"a webhook is set ({_no_token(tg, registered)}) but mode is polling",
            "run `parley telegram delete-webhook` (the release phase does it on Heroku) "
            "or set PUBLIC_URL",
        )
    return Check("telegram webhook", True, "polling mode, no webhook set")


async def _llm(settings: Settings, clients: RedisClients | None) -> Check:
    from agent_core.agent.agent import check_window
    from agent_core.llm.factory import build_provider, describe

    try:
        provider = build_provider(settings.llm, clients.redis if clients else None)
    except ConfigError as exc:
        return Check("llm", False, exc.problems[0])
    try:  # what every worker refuses at start
        note = check_window(settings.core.context_window, provider, None)
    except ConfigError as exc:
        return Check("llm", False, exc.problems[0])
    backend = settings.llm.resolve_backend()[0]
    variables, model_var = _llm_variables(backend)
    try:
        await provider.initialize()
        models = await provider.list_models()
        model = backend_config(settings.llm).model
        listed = f"{describe(settings.llm)}: reachable, {len(models)} model(s) listed"
        # Ollama lists "llama3.2:latest" for "llama3.2"; an empty list tells nothing
        if models and not {model, f"{model}:latest"} & set(models):
            return Check(
                "llm",
                True,
                f"{listed}; {model!r} is not one of them",
                f"check the model name ({model_var}); the server may not offer it",
                warning=True,
            )
        if demo := settings.demo_in_earnest():
            problem, _, fix = demo.partition("; ")  # what is wrong; what to do
            return Check("llm", True, f"{listed}; {problem}", fix, warning=True)
        if note:
            return Check("llm", True, f"{listed}; {note.removeprefix('note: ')}", warning=True)
        return Check("llm", True, listed)
    except llm_errors.LLMError as exc:
        return Check(
            "llm",
            False,
            f"{describe(settings.llm)}: {type(exc).__name__}: {exc}",
            f"check the {variables} settings",
        )
    finally:
        with contextlib.suppress(Exception):
            await provider.shutdown()


def _llm_variables(backend: str) -> tuple[str, str]:
    """(the variables that configure ``backend``, the one naming its model)."""
    if backend in ("openai", "anthropic", "ollama"):
        own = backend.upper()
        return f"{own}_*", f"{own}_MODEL or LLM_MODEL"
    if backend in PRESETS:
        return f"{PRESETS[backend][1]} and LLM_*", "LLM_MODEL"
    return "LLM_*", "LLM_MODEL"


def gateway_lines(settings: Settings) -> list[str]:
    """One line per configured platform that only a gateway process connects to:
    the web and worker processes never do, and app.json starts with no gateway dyno,
    so without one that platform stays silent and nothing else says why."""
    how = (
        "heroku ps:scale gateway=1"
        if os.environ.get("DYNO")
        else "run `parley run gateway` (or one process of role all)"
    )
    return [f"{name}: needs a gateway process: {how}" for name in settings.gateway_platforms()]


async def release(settings: Settings) -> list[str]:
    """Validate settings, the event loop and Redis; check the Slack and Discord tokens
    as every process will; register (or, polling, remove) the Telegram webhook.
    Raises ConfigError on what would stop the processes (a rejected token); what
    only deserves a look is a line with "warning:" (the deploy goes on)."""
    done: list[str] = ["settings: valid"]
    loop = event_loop_check(settings)
    if not loop.ok:  # fail the deploy here rather than every dyno at start
        raise ConfigError([f"EVENT_LOOP: {loop.detail}; {loop.fix}"])
    done.append(f"event loop: {loop.detail}")
    if grace := grace_warning(settings):
        done.append(f"shutdown: warning: {grace}")
    if warning := metrics_warning(settings):
        done.append(f"metrics: warning: {warning}")
    clients, embedded, rc = await _redis(settings)
    try:
        if not rc.ok or clients is None:
            raise ConfigError([f"redis: {rc.detail}"])
        done.append(f"redis: {rc.detail}")
        conn = await _connections(settings, clients)
        if not conn.ok:
            done.append(f"redis connections: warning: {conn.detail}; {conn.fix}")
        from agent_core.agent.agent import check_window
        from agent_core.llm.factory import build_provider

        # key presence and shape; the model's context window, as every worker checks it
        note = check_window(settings.core.context_window, build_provider(settings.llm, None), None)
        done.append(f"llm: configuration valid{f'; {note}' if note else ''}")
        if demo := settings.demo_in_earnest():
            done.append(f"llm: warning: {demo}")
        status = settings.platform_status()
        for name in settings.incomplete_platforms():
            done.append(f"{name}: warning: off: {status[name][1]}; {_incomplete_fix(name)}")
        # every process starts every configured channel, and refuses to start on a
        # token its platform rejects: refuse the deploy instead (the web dyno, which
        # serves the other platforms' webhooks, would crash-loop with the rest)
        for name in ("slack", "discord"):
            if not status.get(name, (False, ""))[0]:
                continue
            row, _ = await _platform_check(settings, name, clients)
            if row.rejected:
                raise ConfigError([row.detail])
            if row.ok:
                done.append(f"{name}: {row.detail}")
            else:  # unreachable now: the processes start anyway and retry
                done.append(f"{name}: warning: {row.detail}")
        if status.get("telegram", (False, ""))[0]:
            done.append(await _release_telegram(settings))
        done.extend(gateway_lines(settings))
    finally:
        if clients is not None:
            await clients.close()
        if embedded is not None:
            await embedded.stop()
    return done


async def _release_telegram(settings: Settings) -> str:
    """Register the webhook (webhook mode) or remove a stale one (polling mode: the
    gateway's getUpdates is refused while one is set).  A rejected token or a refused
    setWebhook raises ConfigError; Telegram unreachable or rate limited is a warning
    line (the processes start anyway)."""
    from channels.telegram import admin
    from channels.telegram.channel import TelegramUnreachable

    tg = settings.platforms["telegram"]
    public = settings.core.public_url
    hint = "; or set PUBLIC_URL to this app's URL for a webhook" if os.environ.get("DYNO") else ""
    if tg.resolved_mode(public) == "webhook":
        try:
            return await admin.set_webhook(tg, public)
        except TelegramUnreachable as exc:
            return (
                f"telegram: warning: {exc.problems[0]}; the webhook was left as it is "
                "(the deploy goes on; run the release again or `parley doctor` later)"
            )
    try:
        info = await admin.webhook_status(tg)
        if not info.url:
            return f"telegram: polling mode (no PUBLIC_URL), no webhook set{hint}"
        await admin.delete_webhook(tg)
    except TelegramUnreachable as exc:
        return (
            f"telegram: warning: polling mode (no PUBLIC_URL), but {exc.problems[0]}; a "
            "webhook left at Telegram would refuse the gateway's polling (409): run "
            f"`parley telegram delete-webhook` if one is set{hint}"
        )
    # an older bot's webhook URL may hold the token in its path (url_path=TOKEN)
    shown = _no_token(tg, info.url)
    return (
        f"telegram: polling mode (no PUBLIC_URL); deleted the webhook set at {shown} "
        f"(polling needs none){hint}"
    )
