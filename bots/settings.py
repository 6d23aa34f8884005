"""All of Parley's settings, loaded together so every problem is reported at once."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from agent_core.errors import ConfigError
from agent_core.llm.settings import LLMSettings
from agent_core.settings import PLAINTEXT_SECRETS, CoreSettings, ParleySettings, load
from channels.web.channel import WebSettings

# Platform channel packages, in start-up summary order.
PLATFORMS = ("telegram", "slack", "discord")


@dataclass
class Settings:
    core: CoreSettings
    llm: LLMSettings
    web: WebSettings
    platforms: dict[str, Any] = field(default_factory=dict)  # name -> that channel's settings
    modules: dict[str, Any] = field(default_factory=dict)  # name -> channel package

    @property
    def hosted(self) -> bool:
        """On a platform like Heroku ($DYNO, or $PORT given by the platform)."""
        return "DYNO" in os.environ or "PORT" in os.environ

    def platform_status(self) -> dict[str, tuple[bool, str]]:
        out: dict[str, tuple[bool, str]] = {}
        for name in PLATFORMS:
            mod = self.modules.get(name)
            if mod is None:
                out[name] = (False, "not available in this build")
                continue
            out[name] = mod.status(self.platforms[name])
        return out

    def secret_values(self) -> list[str]:
        """Every configured secret value (for the log redaction filter)."""
        vals: list[str] = []
        objs: list[ParleySettings] = [self.core, self.llm, self.web, *self.platforms.values()]
        for obj in objs:
            for name in type(obj).model_fields:
                v = getattr(obj, name)
                if isinstance(v, SecretStr) and len(v.get_secret_value()) >= 6:
                    vals.append(v.get_secret_value())
        if self.core.redis_url is not None:
            from urllib.parse import urlsplit

            pw = urlsplit(self.core.redis_url.get_secret_value()).password
            if pw:
                vals.append(pw)
        return vals

    @property
    def plaintext_secrets(self) -> list[str]:
        return sorted(PLAINTEXT_SECRETS)


def _channel_module(name: str) -> Any:
    try:
        mod = importlib.import_module(f"channels.{name}")
    except ImportError:
        return None
    if not all(hasattr(mod, a) for a in ("SETTINGS", "status", "create")):
        return None
    return mod


def load_settings() -> Settings:
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
    if problems:
        raise ConfigError(problems)
    return Settings(loaded["core"], loaded["llm"], loaded["web"], platforms, modules)
