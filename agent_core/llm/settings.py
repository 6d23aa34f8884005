"""LLM settings: which backend, which model, which keys, and every reliability knob."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr, field_validator

from agent_core.settings import MAX_TTL_SECS, ParleySettings, header_safe, http_url

BACKENDS = ("openai", "anthropic", "ollama", "openai_compatible", "demo")
ALIASES = {"claude": "anthropic", "compatible": "openai_compatible"}
OLLAMA_DEFAULT_CONTEXT = 4096  # Ollama's num_ctx when nothing sets it (under 24 GiB VRAM)


class LLMSettings(ParleySettings):
    llm_backend: str = ""  # empty: chosen from the keys present (see resolve_backend)
    llm_model: str = ""
    llm_base_url: str = ""
    llm_api_key: SecretStr | None = None
    llm_extra_headers: str = ""
    llm_timeout_secs: float = Field(default=120.0, gt=0)
    llm_connect_timeout_secs: float = Field(default=10.0, gt=0)
    llm_pool_size: int = Field(default=100, ge=1)
    llm_max_tokens: int = Field(default=4096, ge=1)  # default answer budget (Anthropic needs one)
    llm_vision: bool | None = None  # force vision support on/off; unset: from the price table

    openai_api_key: SecretStr | None = None
    openai_model: str = "gpt-4o"
    openai_base_url: str = "https://api.openai.com/v1"

    anthropic_api_key: SecretStr | None = None
    anthropic_model: str = "claude-sonnet-4-20250514"
    anthropic_base_url: str = "https://api.anthropic.com"
    # cache_control breakpoints on the tools + system prefix and the history
    # (on / off, true / false); off: every call pays full input price
    anthropic_prompt_cache: bool = True
    # how long a cached prefix lives after its last use: 5m (writes cost 1.25x the
    # input price) or 1h (writes 2x; pays off when a conversation pauses 5-60 min)
    anthropic_prompt_cache_ttl: str = "5m"

    ollama_base_url: str = "http://localhost:11434"
    ollama_model: str = "llama3.2"
    # The context Ollama runs models with: 4096 unless the server was started with
    # OLLAMA_CONTEXT_LENGTH (read here too, when Parley sees it) or a Modelfile
    # num_ctx; /v1 cannot change it, and longer prompts are cut from the front.
    ollama_context_window: int = Field(
        default=OLLAMA_DEFAULT_CONTEXT,
        ge=1,
        validation_alias=AliasChoices("ollama_context_window", "ollama_context_length"),
    )

    # keys of the openai_compatible presets (see PRESETS)
    openrouter_api_key: SecretStr | None = None
    nearai_api_key: SecretStr | None = None
    tinfoil_api_key: SecretStr | None = None
    groq_api_key: SecretStr | None = None
    together_api_key: SecretStr | None = None

    # --- reliability ----------------------------------------------------------
    llm_max_retries: int = Field(default=3, ge=0, le=20)
    llm_retry_after_max_secs: float = Field(default=60.0, ge=0)  # longer waits: give up
    circuit_breaker_threshold: int = Field(default=5, ge=1)
    circuit_breaker_recovery_secs: float = Field(default=30.0, gt=0)
    response_cache_enabled: bool = False
    response_cache_ttl_secs: int = Field(default=3600, ge=1, le=MAX_TTL_SECS)
    response_cache_max_entries: int = Field(default=1000, ge=1)
    llm_fallback_model: str = ""  # same backend, another model
    llm_fallbacks: str = ""  # backend:model,backend:model
    llm_failover_threshold: int = Field(default=3, ge=1)
    llm_failover_cooldown_secs: float = Field(default=300.0, ge=0)
    llm_cheap_model: str = ""  # empty: smart routing off
    smart_routing_cascade: bool = True

    # --- costs and tools ------------------------------------------------------
    llm_prices_file: str = ""  # TOML or JSON price overrides
    llm_flatten_tools: bool = False  # tool calls/results as text for tool-less backends
    llm_strict_tools: bool = True  # OpenAI strict-mode schema normalisation

    @field_validator("llm_backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        v = v.strip().lower()
        v = ALIASES.get(v, v)
        if v and v not in BACKENDS and v not in PRESETS:
            known = ", ".join((*BACKENDS, *PRESETS))
            raise ValueError(f"unknown backend {v!r}; use one of: {known}")
        return v

    @field_validator(
        "llm_model",
        "llm_cheap_model",
        "llm_fallback_model",
        "openai_model",
        "anthropic_model",
        "ollama_model",
    )
    @classmethod
    def _model(cls, v: str) -> str:
        """A model name without surrounding whitespace (a paste's trailing space or
        newline: the provider would answer "model not found"); blank is unset (a
        vendor's own model then falls back as if it were not set)."""
        return v.strip()

    @field_validator("llm_extra_headers")
    @classmethod
    def _headers(cls, v: str) -> str:
        parse_headers(v)  # raises ValueError on a malformed pair (never echoing it)
        return v

    @field_validator("anthropic_prompt_cache_ttl")
    @classmethod
    def _cache_ttl(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in ("5m", "1h"):
            raise ValueError("use 5m or 1h")
        return v

    @field_validator("openai_base_url", "anthropic_base_url", "ollama_base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        return http_url(v)

    @field_validator("llm_base_url")
    @classmethod
    def _compatible_url(cls, v: str) -> str:
        return http_url(v, required=False)

    @field_validator("llm_fallbacks")
    @classmethod
    def _fallbacks(cls, v: str) -> str:
        parse_fallbacks(v)
        return v

    def resolve_backend(self) -> tuple[str, str]:
        """(backend, why) — the start-up summary and `parley doctor` print the why.

        LLM_BACKEND wins.  Unset, the first that applies: OPENAI_API_KEY -> openai,
        ANTHROPIC_API_KEY -> anthropic, a preset's key (OPENROUTER_API_KEY, …) ->
        that preset, LLM_BASE_URL or LLM_API_KEY -> openai_compatible,
        OLLAMA_BASE_URL or OLLAMA_MODEL -> ollama; else the offline demo.
        """
        if self.llm_backend:
            return self.llm_backend, "LLM_BACKEND is set"
        chosen = self._candidates()
        if not chosen:
            return "demo", "no LLM_BACKEND and no API key set"
        backend, var = chosen[0]
        # a preset uses LLM_BASE_URL / LLM_API_KEY too (as overrides), so they are not ignored
        used = {backend, "openai_compatible"} if backend in PRESETS else {backend}
        ignored = [v for b, v in chosen[1:] if b not in used]
        if ignored:
            return backend, f"{var} is set; {', '.join(ignored)} ignored (LLM_BACKEND chooses)"
        return backend, f"{var} is set"

    def chosen_by(self) -> str:
        """The variable that chose the backend: LLM_BACKEND, the first key or URL
        that applies (see :meth:`resolve_backend`), or "" (the demo)."""
        if self.llm_backend:
            return "LLM_BACKEND"
        chosen = self._candidates()
        return chosen[0][1] if chosen else ""

    def _candidates(self) -> list[tuple[str, str]]:
        """(backend, variable) for each variable set that would choose a backend, in
        the order of precedence."""
        chosen: list[tuple[str, str]] = []
        if self.openai_api_key is not None:
            chosen.append(("openai", "OPENAI_API_KEY"))
        if self.anthropic_api_key is not None:
            chosen.append(("anthropic", "ANTHROPIC_API_KEY"))
        for name, (_, var) in PRESETS.items():
            if getattr(self, f"{name}_api_key", None) is not None:
                chosen.append((name, var))
        if self.llm_base_url:
            chosen.append(("openai_compatible", "LLM_BASE_URL"))
        elif self.llm_api_key is not None:
            chosen.append(("openai_compatible", "LLM_API_KEY"))
        if "ollama_base_url" in self.model_fields_set:
            chosen.append(("ollama", "OLLAMA_BASE_URL"))
        elif "ollama_model" in self.model_fields_set:
            chosen.append(("ollama", "OLLAMA_MODEL"))
        return chosen

    def extra_headers(self) -> dict[str, str]:
        return parse_headers(self.llm_extra_headers)

    def fallbacks(self) -> list[tuple[str, str]]:
        return parse_fallbacks(self.llm_fallbacks)

    def preset_key(self, backend: str) -> SecretStr | None:
        """The API key of a preset backend (``<PROVIDER>_API_KEY``), else LLM_API_KEY."""
        key: SecretStr | None = getattr(self, f"{backend}_api_key", None)
        return key if key is not None else self.llm_api_key


def parse_headers(raw: str) -> dict[str, str]:
    """``Key:Value,Key2:Value2`` -> dict; a value may itself contain ':'."""
    out: dict[str, str] = {}
    for n, part in enumerate((p for p in raw.split(",") if p.strip()), 1):
        part = part.strip()
        key, sep, value = part.partition(":")
        if not sep or not key.strip():
            # never the text itself: it usually holds a key
            raise ValueError("expected Name:value pairs separated by commas")
        try:
            header_safe(key)
        except ValueError as exc:
            raise ValueError(f"header {n}'s name {exc}") from None
        if not all(" " <= c <= "~" for c in value.strip()):
            # spaces are fine inside a value ("Bearer sk-…"); the rest as for a key
            bad = next(i for i, c in enumerate(value.strip(), 1) if not " " <= c <= "~")
            raise ValueError(
                f"header {n}'s value contains a character that cannot be sent in an HTTP "
                f"header (position {bad}): a control character or a non-ASCII one "
                "(a curly quote, a non-breaking space); retype it"
            )
        out[key.strip()] = value.strip()
    return out


def parse_fallbacks(raw: str) -> list[tuple[str, str]]:
    """``backend:model,backend:model`` -> [(backend, model)]; a bare name is a backend."""
    out: list[tuple[str, str]] = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        backend, _, model = part.partition(":")
        backend = ALIASES.get(backend.strip().lower(), backend.strip().lower())
        if backend not in BACKENDS and backend not in PRESETS:
            raise ValueError(f"unknown backend {backend!r} in fallback {part!r}")
        out.append((backend, model.strip()))
    return out


# openai_compatible presets: backend name -> (base URL, key variable)
PRESETS: dict[str, tuple[str, str]] = {
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "nearai": ("https://cloud-api.near.ai/v1", "NEARAI_API_KEY"),
    "tinfoil": ("https://inference.tinfoil.sh/v1", "TINFOIL_API_KEY"),
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "together": ("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
}
