"""One backend's resolved configuration: where to send requests, with which key.

:func:`backend_config` turns :class:`LLMSettings` plus a backend name (and an
optional model override, for fallbacks and the cheap model) into a
:class:`BackendConfig`, raising :class:`ConfigError` when a required key or URL
is missing.  Backends are built from a BackendConfig, never from raw settings,
so a fallback on another backend or model is the same code path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import SecretStr

from agent_core.errors import ConfigError
from agent_core.llm.settings import ALIASES, PRESETS, LLMSettings


@dataclass(frozen=True, slots=True)
class BackendConfig:
    backend: str  # openai | anthropic | ollama | openai_compatible | demo | a preset name
    kind: str  # wire format: openai | anthropic | ollama | demo
    model: str
    base_url: str
    api_key: str = field(default="", repr=False)
    extra_headers: dict[str, str] = field(default_factory=dict, repr=False)
    timeout_secs: float = 120.0
    connect_timeout_secs: float = 10.0
    pool_size: int = 100
    max_tokens: int = 4096
    vision: bool | None = None
    strict_tools: bool = False
    flatten_tools: bool = False
    local: bool = False  # zero cost
    context_window: int = 0  # tokens every model of this backend gets; 0: the price table's
    prompt_cache: bool = False  # Anthropic cache_control breakpoints (ANTHROPIC_PROMPT_CACHE)
    cache_ttl: str = "5m"  # their lifetime: 5m | 1h (ANTHROPIC_PROMPT_CACHE_TTL)
    # longest rate-limit window held for every caller (LLM_RETRY_AFTER_MAX_SECS)
    retry_after_max_secs: float = 60.0

    @property
    def label(self) -> str:
        return f"{self.backend}:{self.model}"


def _key(v: SecretStr | None) -> str:
    return v.get_secret_value().strip() if v is not None else ""


def _make(
    settings: LLMSettings,
    backend: str,
    kind: str,
    model: str,
    base_url: str,
    api_key: str = "",
    headers: dict[str, str] | None = None,
    *,
    strict_tools: bool = False,
    local: bool = False,
    context_window: int = 0,
    prompt_cache: bool = False,
    cache_ttl: str = "5m",
) -> BackendConfig:
    return BackendConfig(
        backend=backend,
        kind=kind,
        model=model,
        base_url=base_url,
        api_key=api_key,
        extra_headers=headers or {},
        timeout_secs=settings.llm_timeout_secs,
        connect_timeout_secs=settings.llm_connect_timeout_secs,
        pool_size=settings.llm_pool_size,
        max_tokens=settings.llm_max_tokens,
        vision=settings.llm_vision,
        strict_tools=strict_tools,
        flatten_tools=settings.llm_flatten_tools,
        local=local,
        context_window=context_window,
        prompt_cache=prompt_cache,
        cache_ttl=cache_ttl,
        retry_after_max_secs=settings.llm_retry_after_max_secs,
    )


def _when(settings: LLMSettings, name: str) -> str:
    """Why backend ``name`` is in use, for a line naming what it is missing: the
    variable that chose it (the user may never have set LLM_BACKEND), or
    LLM_FALLBACKS for a fallback on another backend."""
    primary = settings.resolve_backend()[0]
    if ALIASES.get(primary, primary) != name:
        return f"for the {name} fallback (LLM_FALLBACKS)"
    var = settings.chosen_by()
    if var == "LLM_BACKEND":
        return f"when LLM_BACKEND={name}"
    return f"when {var} is set (the {name} {'preset' if name in PRESETS else 'backend'})"


def _vendor_model(settings: LLMSettings, name: str) -> str:
    """The model of the openai, anthropic or ollama backend: its own variable
    (OPENAI_MODEL, …) when set, else LLM_MODEL when this backend is the primary one
    (a fallback on it never takes the primary's LLM_MODEL), else the default."""
    field = f"{name}_model"
    own: str = getattr(settings, field)
    if field in settings.model_fields_set and own.strip():
        return own.strip()
    if settings.llm_model.strip() and settings.resolve_backend()[0] == name:
        return settings.llm_model.strip()
    default: str = type(settings).model_fields[field].default
    return own.strip() or default


def backend_config(
    settings: LLMSettings, backend: str | None = None, model: str | None = None
) -> BackendConfig:
    """Resolve ``backend`` (default: the configured one) into a BackendConfig."""
    name = backend or settings.resolve_backend()[0]
    name = ALIASES.get(name, name)
    problems: list[str] = []
    if name == "openai":
        key = _key(settings.openai_api_key)
        if not key:
            problems.append(f"OPENAI_API_KEY: required {_when(settings, name)}")
        cfg = _make(
            settings,
            name,
            "openai",
            model or _vendor_model(settings, "openai"),
            settings.openai_base_url.rstrip("/"),
            key,
            strict_tools=settings.llm_strict_tools,
        )
    elif name == "anthropic":
        key = _key(settings.anthropic_api_key)
        if not key:
            problems.append(f"ANTHROPIC_API_KEY: required {_when(settings, name)}")
        cfg = _make(
            settings,
            name,
            "anthropic",
            model or _vendor_model(settings, "anthropic"),
            settings.anthropic_base_url.rstrip("/"),
            key,
            prompt_cache=settings.anthropic_prompt_cache,
            cache_ttl=settings.anthropic_prompt_cache_ttl,
        )
    elif name == "ollama":
        cfg = _make(
            settings,
            name,
            "ollama",
            model or _vendor_model(settings, "ollama"),
            settings.ollama_base_url.rstrip("/"),
            local=True,
            context_window=settings.ollama_context_window,
        )
    elif name == "openai_compatible":
        if not settings.llm_base_url.strip():
            problems.append(f"LLM_BASE_URL: required {_when(settings, name)} (the server's URL)")
        if not (model or settings.llm_model):
            problems.append(f"LLM_MODEL: required {_when(settings, name)}")
        cfg = _make(
            settings,
            name,
            "openai",
            model or settings.llm_model,
            settings.llm_base_url.strip().rstrip("/"),
            _key(settings.llm_api_key),
            settings.extra_headers(),
        )
    elif name in PRESETS:
        url, var = PRESETS[name]
        key = _key(settings.preset_key(name))
        if not key:
            problems.append(f"{var}: required {_when(settings, name)}")
        if not (model or settings.llm_model):
            problems.append(f"LLM_MODEL: required {_when(settings, name)}")
        cfg = _make(
            settings,
            name,
            "openai",
            model or settings.llm_model,
            (settings.llm_base_url.strip() or url).rstrip("/"),
            key,
            settings.extra_headers(),
        )
    elif name == "demo":
        cfg = _make(
            settings, name, "demo", model or settings.llm_model or "parley-demo", "", local=True
        )
    else:
        raise ConfigError([f"LLM_BACKEND: unknown backend {name!r}"])
    if problems:
        raise ConfigError(problems)
    return cfg
