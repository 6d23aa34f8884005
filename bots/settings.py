"""All of Parley's settings, loaded together so every problem is reported at once."""

from __future__ import annotations

import difflib
import importlib
import ipaddress
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from agent_core.errors import ConfigError
from agent_core.llm.settings import PRESETS, LLMSettings
from agent_core.settings import (
    ENV_FILE,
    ENV_FILE_EXPLICIT,
    PLAINTEXT_SECRETS,
    CoreSettings,
    ParleySettings,
    env_file_problem,
    is_secret,
    load,
    not_utf8,
)
from agent_core.store.client import url_secrets
from channels.web.channel import WebSettings

log = logging.getLogger(__name__)

# Platform channel packages, in start-up summary order.
PLATFORMS = ("telegram", "slack", "discord")

# Names with these prefixes are Parley's settings' (the LLM vendors' and presets'
# too): one that is no setting is most likely a typo.
_OWN_PREFIXES = (
    "PARLEY_",
    "TELEGRAM_",
    "SLACK_",
    "DISCORD_",
    "LLM_",
    "OPENAI_",
    "ANTHROPIC_",
    "OLLAMA_",
    "REDIS_",
    "WEB_CHAT_",
    "DM_",
    "METRICS_",
    *(var.partition("_")[0] + "_" for _, var in PRESETS.values()),
)
# read outside the settings classes (the last two by the tests)
_OTHER_NAMES = frozenset({"PARLEY_ENV_FILE", "PARLEY_LONG", "PARLEY_CHROMIUM"})
# Names with those prefixes that other software sets or reads, often in the same
# environment: the vendors' SDKs and CLIs (OpenAI's, Anthropic's and Claude Code's),
# the Ollama server (`ollama serve` in the same shell; OLLAMA_MODELS is its model
# directory) and Heroku Redis (REDIS_TLS_URL beside REDIS_URL).
_FOREIGN_NAMES = frozenset(
    {
        *(
            "OPENAI_" + n
            for n in [
                "ORG_ID",
                "ORGANIZATION",
                "PROJECT",
                "PROJECT_ID",
                "API_BASE",
                "API_TYPE",
                "API_VERSION",
                "LOG",
                "ADMIN_KEY",
                "WEBHOOK_SECRET",
                "PROXY",
            ]
        ),
        *(
            "ANTHROPIC_" + n
            for n in [
                "AUTH_TOKEN",
                "LOG",
                "BETAS",
                "CUSTOM_HEADERS",
                "SMALL_FAST_MODEL",
                "DEFAULT_OPUS_MODEL",
                "DEFAULT_SONNET_MODEL",
                "DEFAULT_HAIKU_MODEL",
                "VERTEX_PROJECT_ID",
                "VERTEX_BASE_URL",
                "BEDROCK_BASE_URL",
            ]
        ),
        *(
            "OLLAMA_" + n
            for n in [
                "HOST",
                "MODELS",
                "KEEP_ALIVE",
                "NUM_PARALLEL",
                "MAX_LOADED_MODELS",
                "MAX_QUEUE",
                "ORIGINS",
                "DEBUG",
                "FLASH_ATTENTION",
                "KV_CACHE_TYPE",
                "LLM_LIBRARY",
                "GPU_OVERHEAD",
                "LOAD_TIMEOUT",
                "NOHISTORY",
                "NOPRUNE",
                "SCHED_SPREAD",
                "TMPDIR",
                "INTEL_GPU",
                "MULTIUSER_CACHE",
                "NEW_ENGINE",
                "API_KEY",
                "NUM_GPU",
            ]
        ),
        "REDIS_TLS_URL",
    }
)
# a hint for a name difflib finds nothing close to
_HINTS = {
    **{
        "REDIS_" + n: "Parley reads only REDIS_URL: redis://[:password@]host:port[/db]"
        for n in ["HOST", "PORT", "PASSWORD", "USERNAME", "USER", "DB"]
    },
    **{
        var.partition("_")[0] + "_MODEL": "a preset's model is LLM_MODEL"
        for _, var in PRESETS.values()
    },
}

HEROKU_WITHOUT_REDIS = (
    "REDIS_URL is not set: on Heroku every dyno would get its own private Redis "
    "(the web dyno would accept messages no worker ever reads); add the add-on: "
    "heroku addons:create heroku-redis:premium-0 (it sets REDIS_URL; deploy/heroku.md "
    "says which plan)"
)

# Header names whose values are secrets (LLM_EXTRA_HEADERS), for log redaction.
_SECRET_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie", "password")


@dataclass
class Settings:
    core: CoreSettings
    llm: LLMSettings
    web: WebSettings
    platforms: dict[str, Any] = field(default_factory=dict)  # name -> that channel's settings
    modules: dict[str, Any] = field(default_factory=dict)  # name -> channel package

    @property
    def on_heroku(self) -> bool:
        """$DYNO is set: Heroku, where the web process must listen on 0.0.0.0.

        $PORT alone proves nothing (a developer sets it on a laptop); other
        platforms say HOST=0.0.0.0 themselves (deploy/Dockerfile does)."""
        return bool(os.environ.get("DYNO"))

    def demo_in_earnest(self) -> str:
        """Why the offline demo model answering here is likely a mistake (a deployed
        bot answering real people with canned replies); "" when it is not."""
        if self.llm.resolve_backend()[0] != "demo":
            return ""
        platforms = [name for name, (on, _) in self.platform_status().items() if on]
        if platforms:
            where = f"{' and '.join(platforms)} {'is' if len(platforms) == 1 else 'are'} configured"
        elif self.on_heroku:
            where = "this is a Heroku dyno ($DYNO)"
        else:
            return ""
        return (
            f"the offline demo model answers, though {where}: people get canned demo "
            "replies; set an LLM key (OPENAI_API_KEY, ANTHROPIC_API_KEY, a preset's key "
            "such as OPENROUTER_API_KEY) or LLM_BACKEND"
        )

    def require_shared_redis(self) -> None:
        """Raise ConfigError on Heroku ($DYNO) when REDIS_URL is unset (the add-on is
        missing or detached): each dyno would start its own embedded Valkey, and the
        web dyno would acknowledge messages into a Redis no worker reads."""
        if self.on_heroku and self.core.redis_url is None:
            raise ConfigError([HEROKU_WITHOUT_REDIS])

    @property
    def hosted(self) -> bool:
        """Reachable from other machines: on Heroku, or HOST is not a loopback
        address.  Then the web chat is off unless WEB_CHAT_ENABLED=true."""
        return self.on_heroku or not is_loopback(self.core.host or "127.0.0.1")

    def platform_status(self) -> dict[str, tuple[bool, str]]:
        out: dict[str, tuple[bool, str]] = {}
        for name in PLATFORMS:
            mod = self.modules.get(name)
            if mod is None:
                out[name] = (False, "not available in this build")
                continue
            if name == "telegram":  # its mode depends on PUBLIC_URL
                out[name] = mod.status(self.platforms[name], self.core.public_url)
            else:
                out[name] = mod.status(self.platforms[name])
        return out

    def gateway_platforms(self) -> list[str]:
        """The platforms on whose connection only a gateway process listens (the
        Discord gateway, Telegram long polling, Slack Socket Mode): configured,
        they are silent unless a process of role ``gateway`` (or ``all``) runs."""
        out = []
        for name, (on, _) in self.platform_status().items():
            s: Any = self.platforms.get(name)
            if not on or s is None:
                continue
            if (
                name == "discord"
                or (name == "telegram" and s.resolved_mode(self.core.public_url) == "polling")
                or (name == "slack" and s.slack_app_token is not None)
            ):
                out.append(name)
        return out

    def gateway_lease(self, name: str) -> str:
        """The lease name of ``name``'s gateway connection (``Channel.gateway_lease``)."""
        if name == "discord":
            from channels.discord.settings import gateway_lease

            return gateway_lease(self.platforms[name].discord_shards)
        return name

    def incomplete_platforms(self) -> list[str]:
        """Platforms that are off though their bot token is set (something else they
        need is missing: ``SLACK_BOT_TOKEN`` without a signing secret or app token):
        the web chat's line names them.  Another secret alone configures nothing: the
        Heroku button generates ``TELEGRAM_WEBHOOK_SECRET`` for every app, Telegram
        used or not."""
        out = []
        for name, (on, _) in self.platform_status().items():
            s = self.platforms.get(name)
            if on or s is None:
                continue
            if getattr(s, f"{name}_bot_token", None) is not None:
                out.append(name)
        return out

    def secret_values(self) -> list[str]:
        """Every configured secret value (for the log redaction filter)."""
        vals: list[str] = []
        objs: list[ParleySettings] = [self.core, self.llm, self.web, *self.platforms.values()]
        for obj in objs:
            for name in type(obj).model_fields:
                v = getattr(obj, name)
                if obj is self.core and name == "redis_url":
                    continue  # its password below: the host and port are no secret
                if isinstance(v, SecretStr) and len(v.get_secret_value()) >= 6:
                    vals.append(v.get_secret_value())
        # credentials inside URLs (redis://:pw@…, https://user:key@proxy/v1)
        if self.core.redis_url is not None:
            vals.extend(url_secrets(self.core.redis_url.get_secret_value()))
        llm = self.llm
        for url in (
            llm.llm_base_url,
            llm.openai_base_url,
            llm.anthropic_base_url,
            llm.ollama_base_url,
        ):
            vals.extend(v for v in url_secrets(url) if len(v) >= 6)
        # LLM_EXTRA_HEADERS may carry an Authorization or API-key header
        for name, value in llm.extra_headers().items():
            if any(w in name.lower() for w in _SECRET_HEADER_WORDS):
                # the whole value and the credential after a scheme ("Bearer sk-…")
                vals.extend(v for v in {value, value.split()[-1] if value else ""} if len(v) >= 6)
        return vals

    @property
    def plaintext_secrets(self) -> list[str]:
        return sorted(PLAINTEXT_SECRETS)


def is_loopback(host: str) -> bool:
    """127.x, ::1 or localhost (only this machine can connect)."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _channel_module(name: str) -> Any:
    try:
        mod = importlib.import_module(f"channels.{name}")
    except ImportError:
        return None
    if not all(hasattr(mod, a) for a in ("SETTINGS", "status", "create")):
        return None
    return mod


def _check_env_file() -> None:
    """Report each line of the ``.env`` file that cannot be parsed, once, with the
    file and line (python-dotenv warns about it at every settings class, without
    the file, and skips the line)."""
    from dotenv.parser import parse_stream

    path = Path(ENV_FILE)
    logging.getLogger("dotenv.main").setLevel(logging.ERROR)
    if problem := env_file_problem(path, ENV_FILE_EXPLICIT):
        raise ConfigError([problem])
    if problem := not_utf8(path):
        # once, not again from every settings class that reads the file
        raise ConfigError([problem])
    try:
        with path.open(encoding="utf-8") as f:
            bad = [b.original.line for b in parse_stream(f) if b.error]
    except (OSError, UnicodeDecodeError):
        return  # missing or unreadable: the settings sources say what they need
    for line in bad:
        log.warning("%s line %d cannot be parsed; it is ignored (expected NAME=value)", path, line)


def known_names(classes: Iterable[type[ParleySettings]], passed: str = "") -> set[str]:
    """Every variable the settings classes read (a secret's ``<NAME>_FILE`` too), and
    those named in ``passed`` (``SHELL_TOOL_ENV``: handed to the shell tool)."""
    names = set(_OTHER_NAMES) | {n.strip().upper() for n in passed.split(",") if n.strip()}
    for cls in classes:
        for name, f in cls.model_fields.items():
            env = (f.alias or name).upper()
            names.update((env, env + "_FILE") if is_secret(f) else (env,))
            # other names a field reads (OLLAMA_CONTEXT_LENGTH, the Ollama server's own)
            choices = getattr(f.validation_alias, "choices", ())
            names.update(c.upper() for c in choices if isinstance(c, str))
    return names


def unknown_names(given: Iterable[str], known: set[str]) -> list[str]:
    """A line for each name in ``given`` that looks like a Parley setting (its prefix
    is one of Parley's) but is none, with the closest real one."""
    out = []
    for name in sorted(set(given)):
        upper = name.upper()
        if not upper.startswith(_OWN_PREFIXES) or upper in known or upper in _FOREIGN_NAMES:
            continue
        close = difflib.get_close_matches(upper, sorted(known), n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        if upper in _HINTS:
            hint = f" ({_HINTS[upper]})"
        out.append(f"{name} is not a Parley setting; it is ignored{hint}")
    return out


def _env_file_values() -> dict[str, str]:
    from dotenv import dotenv_values

    # before any dotenv_values call (the first is early_log_settings', before logging
    # is set up): python-dotenv's own warning about a bad line would reach the
    # last-resort handler as plain text; _check_env_file reports the line once
    logging.getLogger("dotenv.main").setLevel(logging.ERROR)
    try:
        return {k: v or "" for k, v in dotenv_values(ENV_FILE).items() if k}
    except (OSError, UnicodeDecodeError):
        return {}


def early_log_settings() -> tuple[str, str]:
    """LOG_LEVEL and LOG_FORMAT (the environment first, then the .env file) before
    the settings are loaded, so what loading them warns is in the chosen format;
    anything unexpected: INFO, text (loading the settings then says what is wrong)."""
    from_file: dict[str, str] | None = None

    def value(name: str, default: str) -> str:
        nonlocal from_file
        if name in os.environ:
            return os.environ[name]
        if from_file is None:
            from_file = _env_file_values()
        return from_file.get(name, default)

    fmt = value("LOG_FORMAT", "text").strip().lower()
    level = value("LOG_LEVEL", "INFO").strip().upper()
    if level == "WARN":
        level = "WARNING"
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        level = "INFO"
    return level, fmt if fmt in ("text", "json") else "text"


def _check_unknown_names() -> None:
    classes: list[type[ParleySettings]] = [CoreSettings, LLMSettings, WebSettings]
    classes += [mod.SETTINGS for n in PLATFORMS if (mod := _channel_module(n)) is not None]
    from_file = _env_file_values()
    # SHELL_TOOL_ENV, from the environment or .env: names handed to the shell tool
    passed = os.environ.get("SHELL_TOOL_ENV") or from_file.get("SHELL_TOOL_ENV") or ""
    names = [*os.environ, *from_file]
    for line in unknown_names(names, known_names(classes, passed)):
        log.warning("%s", line)


def load_settings() -> Settings:
    _check_env_file()
    _check_unknown_names()
    problems: list[str] = []
    loaded: dict[str, Any] = {}
    for key, cls in (("core", CoreSettings), ("llm", LLMSettings), ("web", WebSettings)):
        try:
            loaded[key] = load(cls)
        except ConfigError as exc:
            problems.extend(exc.problems)
    platforms: dict[str, Any] = {}
    modules: dict[str, Any] = {}
    for name in PLATFORMS:
        mod = _channel_module(name)
        if mod is None:
            continue
        try:
            platforms[name] = load(mod.SETTINGS)
            modules[name] = mod
        except ConfigError as exc:
            problems.extend(exc.problems)
    if "core" in loaded:
        problems.extend(check_paths(loaded["core"]))
    if problems:
        raise ConfigError(problems)
    return Settings(loaded["core"], loaded["llm"], loaded["web"], platforms, modules)


def check_paths(core: CoreSettings) -> list[str]:
    """The paths an operator set explicitly that are not there.  SHELL_TOOL_WORKDIR
    with the shell tool on is a problem (returned): every run_shell call would fail.
    PROFILES_DIR and HEARTBEAT_FILE are warned about (logged): Parley works without
    them (the default profile; a checklist set with /heartbeat set)."""
    given = core.model_fields_set
    problems = []
    workdir = core.shell_tool_workdir  # as run_shell uses it (no ~ expansion)
    shell = "shell_tool_workdir" in given and workdir and core.enable_shell_tool
    if shell and not Path(workdir).is_dir():
        problems.append(
            f"SHELL_TOOL_WORKDIR: {workdir!r} is not a directory (it is not created); "
            "create it, or unset SHELL_TOOL_WORKDIR for PARLEY_DATA_DIR/shell"
        )
    if "profiles_dir" in given and not core.profiles_dir.is_dir():
        log.warning(
            "PROFILES_DIR: %r is not a directory: no agent profile is loaded besides "
            "the default one",
            str(core.profiles_dir),
        )
    if "heartbeat_file" in given and not core.heartbeat_file.is_file():
        log.warning(
            "HEARTBEAT_FILE: %r is not a file: the heartbeat has no checklist unless one "
            "is set with /heartbeat set",
            str(core.heartbeat_file),
        )
    return problems
