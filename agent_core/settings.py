"""Settings: every option from the environment (and an optional ``.env``).

Each component has its own settings class (core, LLM, each channel) built on
:class:`ParleySettings`, which adds two things to pydantic-settings:

* every secret (a ``SecretStr`` field) can also come from ``<NAME>_FILE``, the
  path of a file holding it (Docker / Kubernetes secrets).  Precedence is
  environment > file > ``.env``;
* a secret read from the plaintext ``.env`` file is reported once, so an
  operator knows where their keys live.

An empty value means unset (``PORT=`` in a ``.env`` template is the default
port), except for the few variables in :data:`KEEP_EMPTY` where empty is a value
of its own.  Numbers must be finite (``inf`` / ``nan`` are refused).

:func:`load` turns a validation failure into :class:`ConfigError` with one
readable line per problem (the variable, the shape expected, never the value).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import SplitResult, urlsplit

from dotenv import dotenv_values
from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from agent_core.errors import ConfigError

log = logging.getLogger(__name__)

# PARLEY_ENV_FILE= (empty) means unset, as for every setting: the default .env
ENV_FILE = os.environ.get("PARLEY_ENV_FILE") or ".env"
# named explicitly: a file that is not there is a mistake, not "no .env"
ENV_FILE_EXPLICIT = bool(os.environ.get("PARLEY_ENV_FILE"))

# Secrets that were found in the plaintext .env file, reported by the runtime.
PLAINTEXT_SECRETS: set[str] = set()

# Variables for which an empty value is a setting, not "unset": no exempt channel
# (a public web chat gated like the platforms), no working reaction on Slack.
KEEP_EMPTY = frozenset({"ACCESS_EXEMPT_CHANNELS", "SLACK_WORKING_REACTION"})

# Upper bound of the durations Parley hands to Redis (longer ones overflow there).
MAX_TTL_SECS = 10 * 365 * 86_400  # ten years


def is_secret(field: FieldInfo) -> bool:
    ann = field.annotation
    return ann is SecretStr or (
        hasattr(ann, "__args__") and SecretStr in getattr(ann, "__args__", ())
    )


def header_safe(value: str) -> str:
    """``value`` without surrounding whitespace (a paste's trailing newline or
    non-breaking space); ValueError naming the position (1-based, in the stripped
    value) of the first character that is not printable ASCII or is a space: a
    header carrying it cannot be sent (httpx raises).  The value is never echoed."""
    value = value.strip()
    for i, c in enumerate(value, 1):
        if not " " < c <= "~":
            raise ValueError(
                f"contains a character that cannot be sent in an HTTP header (position {i}): "
                "a space, a control character or a non-ASCII one (a curly quote, a "
                "non-breaking space); retype it"
            )
    return value


def _dotenv_raw(
    source: PydanticBaseSettingsSource, needles: Iterable[str]
) -> dict[str, str | None]:
    """The variables of the ``.env`` file(s) ``source`` reads, names upper-cased;
    only a file whose text holds one of ``needles`` (lower case) is parsed again
    (python-dotenv warns about a bad line at each parse, and the source parsed it)."""
    files = getattr(source, "env_file", None)
    if files is None:
        return {}
    wanted = list(needles)
    out: dict[str, str | None] = {}
    for f in [files] if isinstance(files, str | os.PathLike) else files:
        path = Path(f).expanduser()
        try:
            text = path.read_text(errors="replace").lower() if path.is_file() else ""
        except OSError:
            continue
        if any(n in text for n in wanted):
            encoding = getattr(source, "env_file_encoding", None) or "utf-8"
            found = dotenv_values(path, encoding=encoding)
            out.update({k.upper(): v for k, v in found.items()})
    return out


def _environ() -> dict[str, str]:
    return {k.upper(): v for k, v in os.environ.items() if v}


class SecretFileSource(PydanticBaseSettingsSource):
    """Reads ``<NAME>_FILE`` for every secret field whose ``NAME`` is not set: from
    the environment, or (``dotenv`` given) from the ``.env`` file, which ranks below
    the environment as for every other variable."""

    def __init__(
        self, settings_cls: type[BaseSettings], dotenv: PydanticBaseSettingsSource | None = None
    ) -> None:
        super().__init__(settings_cls)
        self.dotenv = dotenv

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        env = _environ()
        names = (
            env
            if self.dotenv is None
            else {k: v for k, v in _dotenv_raw(self.dotenv, ["_file"]).items() if v}
        )
        for name, field in self.settings_cls.model_fields.items():
            if not is_secret(field):
                continue
            env_name = (field.alias or name).upper()
            if env_name in env or env_name in names:
                continue
            if self.dotenv is not None and env_name + "_FILE" in env:
                continue  # the environment's _FILE ranks above the .env file
            path = names.get(env_name + "_FILE")
            if not path:
                continue
            out[name] = _read_secret_file(env_name + "_FILE", path)
        return out


def _read_secret_file(var: str, path: str) -> str:
    """The secret in the file at ``path`` (named by the variable ``var``), stripped;
    ConfigError when it cannot be read or is empty.  A value that names no readable
    file is never echoed: it may be the secret itself, put in ``<NAME>_FILE`` by
    mistake (``OPENAI_API_KEY_FILE=sk-…``)."""
    try:
        # utf-8-sig: a byte-order mark (Windows editors) is not part of the secret
        secret = Path(path).read_text(encoding="utf-8-sig").strip()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError(
            [
                f"{var}: cannot read the file it names ({why}); it must be the path of a "
                f"file holding the secret, not the secret itself (that goes in {var[:-5]})"
            ]
        ) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{var}: {path!r} is not UTF-8 text; save it as UTF-8"]) from None
    if not secret:
        # an unpopulated Docker / Kubernetes secret: not "unset" (the demo model, the
        # channel off), though the operator meant to set it
        raise ConfigError([f"{var}: {path!r} is empty; put the secret in it, or unset {var}"])
    return secret


def _kept_empty(source: PydanticBaseSettingsSource) -> None:
    """Put back the :data:`KEEP_EMPTY` variables that ``env_ignore_empty`` dropped."""
    if not isinstance(source, EnvSettingsSource):
        return
    names = {n for n in source.settings_cls.model_fields if n.upper() in KEEP_EMPTY}
    if not names:
        return
    if isinstance(source, DotEnvSettingsSource):
        raw = {k.lower(): v for k, v in _dotenv_raw(source, names).items()}
    else:
        raw = {k.lower(): v for k, v in os.environ.items()}
    kept = {k: "" for k, v in raw.items() if k in names and v == ""}
    if kept:
        source.env_vars = {**source.env_vars, **kept}


class WarningDotEnvSource(PydanticBaseSettingsSource):
    """Wraps the ``.env`` source, remembering which secrets it supplied."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self.inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        data = self.inner()
        env = _environ()
        for name, field in self.settings_cls.model_fields.items():
            env_name = (field.alias or name).upper()
            # the environment's value (or _FILE) wins over the .env copy: not read
            overridden = env_name in env or env_name + "_FILE" in env
            if name in data and is_secret(field) and not overridden:
                PLAINTEXT_SECRETS.add(env_name)
        return data


class ParleySettings(BaseSettings):
    # Secrets never sent in an HTTP header or URL (REDIS_URL has a check of its
    # own; the web chat's cookie key is only hashed): the others must be printable
    # ASCII without spaces (see :meth:`_header_safe_secret`).
    UNSENT_SECRETS: ClassVar[frozenset[str]] = frozenset({"redis_url", "web_chat_secret"})
    # secrets whose own validator calls header_safe, after removing what it allows
    # (DISCORD_BOT_TOKEN's "Bot " prefix)
    SELF_CHECKED_SECRETS: ClassVar[frozenset[str]] = frozenset()

    model_config = SettingsConfigDict(
        env_file=ENV_FILE,
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        populate_by_name=True,
        env_ignore_empty=True,  # `NAME=` means unset (see KEEP_EMPTY for the exceptions)
        allow_inf_nan=False,  # an infinite timeout overflows at start, or in Redis
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        _kept_empty(env_settings)
        _kept_empty(dotenv_settings)
        dotenv = WarningDotEnvSource(settings_cls, dotenv_settings)
        return (
            init_settings,
            env_settings,
            SecretFileSource(settings_cls),
            dotenv,
            SecretFileSource(settings_cls, dotenv_settings),
        )

    @field_validator("*")
    @classmethod
    def _header_safe_secret(cls, v: Any, info: ValidationInfo) -> Any:
        """Every secret (API keys, bot tokens, signing secrets) goes into an HTTP
        header or URL: surrounding whitespace is dropped (blank = unset), and a
        character a header cannot carry is refused at start, before a request fails
        with a traceback.  Runs before the fields' own validators."""
        skip = cls.UNSENT_SECRETS | cls.SELF_CHECKED_SECRETS
        if not isinstance(v, SecretStr) or info.field_name in skip:
            return v
        raw = header_safe(v.get_secret_value())
        return SecretStr(raw) if raw else None


S = TypeVar("S", bound=BaseSettings)

_SHAPES: dict[str, str] = {
    "int_parsing": "a whole number",
    "float_parsing": "a number",
    "bool_parsing": "true or false",
    "greater_than": "a larger number",
    "greater_than_equal": "a larger number",
    "less_than_equal": "a smaller number",
    "missing": "a value (it is required)",
    "literal_error": "one of the listed values",
    "url_parsing": "a URL",
    "string_pattern_mismatch": "a value of the documented form",
    "finite_number": "a finite number",
}


def _env_name(cls: type[BaseSettings], loc: tuple[int | str, ...]) -> str:
    if not loc:
        return cls.__name__
    name = str(loc[0])
    field = cls.model_fields.get(name)
    return ((field.alias if field and field.alias else None) or name).upper()


def http_url(
    v: str, *, required: bool = True, credentials: str = "put the key in its _API_KEY"
) -> str:
    """``v`` stripped; ValueError unless it is an http(s) URL (the value is not echoed).
    ``credentials``: what to do instead of a ``user:password@`` in it."""
    v = v.strip()
    if not v and not required:
        return v
    if not v.lower().startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    if "@" in urlsplit(v).netloc:
        # an LLM's would be sent beside the key's Authorization header, which fails
        raise ValueError(f"must not carry credentials (user:password@); {credentials}")
    return v


def not_utf8(path: str | os.PathLike[str]) -> str | None:
    """The problem line if the file at ``path`` is not UTF-8 text (a ``.env`` saved
    as Latin-1 / Windows-1252 by a Windows editor), else None (a missing or
    unreadable file too: whoever reads it says so).  The byte is 1-based."""
    try:
        Path(path).expanduser().read_bytes().decode("utf-8")
    except OSError:
        return None
    except UnicodeDecodeError as exc:
        return f"{path}: is not UTF-8 text (byte {exc.start + 1}); save it as UTF-8"
    return None


def env_file_problem(path: str | os.PathLike[str], explicit: bool) -> str | None:
    """The problem line when ``path``, named by ``PARLEY_ENV_FILE`` (``explicit``),
    is not a file that can be read (a typo would start Parley with none of the
    operator's settings); None otherwise, and always for the default ``.env``,
    which is optional."""
    if not explicit:
        return None
    p = Path(path).expanduser()
    if p.is_dir():
        return f"PARLEY_ENV_FILE: {str(path)!r} is a directory, not a file"
    try:
        with p.open("rb"):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        return f"PARLEY_ENV_FILE: cannot read {str(path)!r} ({why}); unset it to use .env"
    return None


def _env_files(cls: type[BaseSettings], overrides: dict[str, Any]) -> list[Any]:
    files = overrides.get("_env_file", cls.model_config.get("env_file"))
    if files is None:
        return []
    return [files] if isinstance(files, str | os.PathLike) else list(files)


def load(cls: type[S], **overrides: Any) -> S:
    """Build ``cls`` from the environment; raise ConfigError with readable lines."""
    try:
        return cls(**overrides)
    except UnicodeDecodeError:
        # python-dotenv reading a .env file that is not UTF-8: name the file
        problems = [p for f in _env_files(cls, overrides) if (p := not_utf8(f))]
        raise ConfigError(
            problems or ["the .env file is not UTF-8 text; save it as UTF-8"]
        ) from None
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False, include_input=False):
            name = _env_name(cls, tuple(err["loc"]))
            shape = _SHAPES.get(err["type"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            problems.append(f"{name}: {msg}" + (f" (expected {shape})" if shape else ""))
        raise ConfigError(problems) from None


DB_PATH_PROBLEM = (
    "the database after the host must be a number, as in redis://host:6379/0 (redis-py "
    "would use database 0 for anything else); percent-encode a '/' in the password"
)


def redis_db_path_ok(parts: SplitResult) -> bool:
    """redis:// and rediss://: the path is empty, "/" or "/<digits>" (unix://: the
    socket's path)."""
    if parts.scheme == "unix":
        return True
    path = parts.path
    return path in ("", "/") or (path[1:].isascii() and path[1:].isdigit())


class CoreSettings(ParleySettings):
    """Options of the runtime core: Redis, data, the web port, the agent basics."""

    redis_url: SecretStr | None = Field(default=None, description="Redis URL; unset = embedded")
    redis_tls_insecure: bool = False
    # connections one process may open: the general pool, and the pool of blocking
    # reads (a worker's consumer, each open web chat page); deploy/heroku.md
    redis_max_connections: int = Field(default=200, ge=1, le=100_000)
    redis_max_blocking_connections: int = Field(default=1000, ge=1, le=100_000)
    parley_data_dir: Path = Path(".parley")
    port: int = Field(default=8000, ge=1, le=65535)
    host: str = ""  # empty: 127.0.0.1, or 0.0.0.0 on Heroku ($DYNO set)
    public_url: str = ""
    web_keepalive_secs: int = Field(default=95, ge=1)  # > the proxy's idle timeout (Heroku: 90)
    # /metrics on the web process: off -> 404; with a token, only a request carrying
    # it (Authorization: Bearer <token>, or basic auth with it as the password)
    metrics_enabled: bool = True
    metrics_token: SecretStr | None = None
    log_level: str = "INFO"  # DEBUG | INFO | WARNING | ERROR | CRITICAL
    log_format: str = "text"  # text | json
    event_loop: str = "auto"  # auto (uvloop when installed) | uvloop | asyncio

    group_reply: str = "mention"  # mention | all
    agent_name: str = "Parley"
    system_prompt: str = ""
    max_history_messages: int = Field(default=200, ge=2)
    worker_concurrency: int = Field(default=256, ge=1)
    worker_busy_lag_ms: float = Field(default=50.0, ge=0)  # 0: read whatever concurrency allows
    lock_ttl_secs: float = Field(default=30.0, ge=0.5, le=MAX_TTL_SECS)
    reclaim_idle_secs: float = Field(default=5.0, gt=0, le=MAX_TTL_SECS)
    sweep_interval_secs: float = Field(default=2.0, gt=0)
    stream_maxlen: int = Field(default=100_000, ge=1000, le=2**62)
    dedup_ttl_secs: int = Field(default=86_400, ge=60, le=MAX_TTL_SECS)
    session_idle_ttl_secs: int = Field(default=30 * 86_400, ge=60, le=MAX_TTL_SECS)
    shutdown_grace_secs: float = Field(default=20.0, ge=0)

    def pool_caps(self) -> dict[str, int]:
        """``make_clients``' pool sizes."""
        return {
            "max_connections": self.redis_max_connections,
            "max_blocking_connections": self.redis_max_blocking_connections,
        }

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, v: str) -> str:
        return http_url(v, required=False, credentials="remove them")

    @field_validator("log_format")
    @classmethod
    def _fmt(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in ("text", "json"):
            raise ValueError("must be text or json")
        return v

    @field_validator("event_loop")
    @classmethod
    def _loop(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in ("auto", "uvloop", "asyncio"):
            raise ValueError("must be auto, uvloop or asyncio")
        return v

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        v = v.strip().upper()
        if v not in ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL"):
            raise ValueError("must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return "WARNING" if v == "WARN" else v

    @field_validator("group_reply")
    @classmethod
    def _group_reply(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in ("mention", "all"):
            raise ValueError("must be mention or all")
        return v

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None or not v.get_secret_value().strip():
            return None
        url = v.get_secret_value().strip()
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        try:
            parts = urlsplit(url)
            _ = parts.port  # a port that is not a number raises ValueError
        except ValueError:
            parts = None
        if parts is None or (parts.scheme != "unix" and not parts.hostname):
            # never the value: it holds the password
            raise ValueError(
                "not a valid URL (expected redis://[:password@]host:port[/db], "
                "rediss://… or unix:///path; percent-encode special characters in the password)"
            )
        if not redis_db_path_ok(parts):
            # never the path either: a password holding "/" spills into it
            raise ValueError(DB_PATH_PROBLEM)
        return SecretStr(url)

    # --- agent core (issue 4) ----------------------------------------------
    max_tool_iterations: int = Field(default=50, ge=1, le=1000)
    tool_timeout_secs: float = Field(default=60.0, gt=0)
    tool_output_max_chars: int = Field(default=16_000, ge=200)
    approval_ttl_secs: int = Field(default=1800, ge=10, le=MAX_TTL_SECS)
    approver_ids: str = ""  # channel-qualified ids: telegram:123,slack:U01,discord:42
    admin_ids: str = ""  # channel-qualified ids that get budget warnings
    http_tool_allowed_hosts: str = ""  # hosts exempt from the private-address refusal
    http_tool_timeout_secs: float = Field(default=20.0, gt=0)
    enable_shell_tool: bool = False
    shell_tool_workdir: str = ""  # '' = PARLEY_DATA_DIR/shell (made empty, mode 0700)
    shell_tool_timeout_secs: float = Field(default=30.0, gt=0)
    shell_tool_env: str = ""  # extra environment variable names the shell may see
    max_undo_checkpoints: int = Field(default=20, ge=1, le=500)
    profiles_dir: Path = Path("profiles")
    context_window: int = Field(default=0, ge=0)  # 0 = the model's own (docs/agent.md)
    daily_budget_usd: float = Field(default=0.0, ge=0)  # 0 = no limit
    user_daily_budget_usd: float = Field(default=0.0, ge=0)
    hourly_action_limit: int = Field(default=0, ge=0)  # LLM calls per user per hour; 0 = off
    user_rate_limit: str = ""  # e.g. 20/minute; '' = off
    dm_policy: str = "pairing"  # open | allowlist | pairing
    # who is answered in groups / channels: open | allowlist | pairing (docs/agent.md)
    group_policy: str = "pairing"
    allowed_users: str = ""  # channel-qualified ids
    access_exempt_channels: str = "web,console"  # the operator's own local channels
    max_attachment_bytes: int = Field(default=10_000_000, ge=0)
    # attachment bytes one process holds at once, all turns together; 0 = no limit
    attachment_memory_bytes: int = Field(default=100_000_000, ge=0)
    # the processes PDFs, Word, Excel and PowerPoint files are read in: at once per
    # worker, and the memory (address space) each may take
    document_readers: int = Field(default=2, ge=1, le=16)
    document_memory_mb: int = Field(default=512, ge=128, le=16384)

    @field_validator("dm_policy", "group_policy")
    @classmethod
    def _dm_policy(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in ("open", "allowlist", "pairing"):
            raise ValueError("must be open, allowlist or pairing")
        return v

    @field_validator("user_rate_limit")
    @classmethod
    def _rate(cls, v: str) -> str:
        from agent_core.agent.access import parse_rate

        parse_rate(v)  # raises ValueError with a readable message
        return v.strip()

    @field_validator("approver_ids", "admin_ids", "allowed_users")
    @classmethod
    def _user_ids(cls, v: str) -> str:
        """``<channel>:<id>`` entries, the form :attr:`InboundEvent.qualified_user`
        takes: a bare ``123456789`` matches nobody (and a bare ADMIN_IDS still
        counts as "an approver is configured", so nobody in a group could /new).
        The channel is lower-cased; the id keeps its case (Slack's U0123ABCD)."""
        from agent_core.events import CHANNELS

        out, bad = [], []
        for entry in (p.strip() for p in v.split(",")):
            if not entry:
                continue
            channel, sep, uid = entry.partition(":")
            channel, uid = channel.strip().lower(), uid.strip()
            if not sep or channel not in CHANNELS or not uid:
                bad.append(entry)
            else:
                out.append(f"{channel}:{uid}")
        if bad:
            names = ", ".join(repr(b) for b in bad)
            raise ValueError(
                f"{names} {'is' if len(bad) == 1 else 'are'} not <channel>:<id>; expected "
                f"e.g. telegram:123456789 (channel: {', '.join(CHANNELS[:-1])} or {CHANNELS[-1]})"
            )
        return ",".join(out)

    @field_validator("access_exempt_channels")
    @classmethod
    def _exempt_channels(cls, v: str) -> str:
        """Channel names, lower-cased (``Web`` is ``web``): a misspelt one (``consol``)
        would gate that channel without a word, so it is refused, naming the known ones."""
        from agent_core.events import CHANNELS

        names = [p.strip().lower() for p in v.split(",") if p.strip()]
        if bad := [n for n in names if n not in CHANNELS]:
            listed = ", ".join(repr(b) for b in bad)
            raise ValueError(
                f"{listed} {'is no channel' if len(bad) == 1 else 'are no channels'}; "
                f"known: {', '.join(CHANNELS)} (empty: none is exempt)"
            )
        return ",".join(dict.fromkeys(names))

    @staticmethod
    def id_list(raw: str) -> frozenset[str]:
        return frozenset(p.strip() for p in raw.split(",") if p.strip())

    # --- proactive (issue 12) -------------------------------------------------
    heartbeat_enabled: bool = False
    heartbeat_interval_secs: float = Field(default=1800.0, gt=0, le=MAX_TTL_SECS)  # claim: SET EX
    heartbeat_notify: str = ""  # a target: telegram:123456, slack:T01/C0123, web:<sid> ...
    heartbeat_file: Path = Path("HEARTBEAT.md")
    heartbeat_max_failures: int = Field(default=3, ge=1)
    turn_timeout_secs: float = Field(default=600.0, ge=0)  # 0 = no limit
    scheduler_enabled: bool = True  # run the routine scheduler in worker processes
    scheduler_tick_secs: float = Field(default=1.0, gt=0)
    scheduler_lease_secs: float = Field(default=15.0, ge=0.3, le=MAX_TTL_SECS)
    routine_timezone: str = "UTC"  # default timezone of cron routines
    routine_run_history: int = Field(default=20, ge=1, le=1000)

    @field_validator("heartbeat_notify")
    @classmethod
    def _heartbeat_target(cls, v: str) -> str:
        from agent_core.proactive.targets import parse_target

        v = v.strip()
        if v:  # tenants are placeholders: whether they are known is checked when sending
            parse_target(v, {"telegram": "x", "slack": "x"})  # TargetError: a ValueError
        return v

    @field_validator("routine_timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        v = v.strip() or "UTC"
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {v!r} (expected e.g. Europe/Paris)") from None
        return v
