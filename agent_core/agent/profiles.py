"""Agent profiles: a named system prompt + model + tool set, from PROFILES_DIR.

One markdown file per profile, with front matter::

    ---
    name: researcher          # default: the file name
    description: Finds things on the web
    model: gpt-4o-mini        # optional; default: the configured model
    tools: http_request, current_time   # optional; default: every tool
    ---
    You are a careful researcher. Cite the URLs you used.

Profiles are read once at start (in a worker thread) and on ``/agent reload``;
nothing on the per-turn path touches the disk.  The default profile is named
after AGENT_NAME; a file of that name overrides it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    system_prompt: str
    model: str = ""
    tools: tuple[str, ...] | None = None  # None: every registered tool
    description: str = ""


def parse_profile(text: str, fallback_name: str) -> Profile:
    meta: dict[str, str] = {}
    body = text
    if text.startswith("---"):
        head, sep, rest = text[3:].partition("\n---")
        if sep:
            body = rest.lstrip("\n")
            for line in head.splitlines():
                line = line.split(" #", 1)[0]
                if ":" in line:
                    k, _, v = line.partition(":")
                    meta[k.strip().lower()] = v.strip().strip("\"'")
    tools: tuple[str, ...] | None = None
    if "tools" in meta:
        raw = meta["tools"].strip("[]")
        tools = tuple(t.strip().strip("\"'") for t in raw.split(",") if t.strip())
    return Profile(
        name=(meta.get("name") or fallback_name).strip().lower(),
        system_prompt=body.strip(),
        model=meta.get("model", ""),
        tools=tools,
        description=meta.get("description", ""),
    )


class Profiles:
    def __init__(self, directory: Path, default: Profile) -> None:
        self.directory = directory
        self.default = default
        self._profiles: dict[str, Profile] = {default.name: default}
        self.errors: list[str] = []

    def load(self) -> int:
        """(Re)read the directory (blocking: call via asyncio.to_thread)."""
        found: dict[str, Profile] = {self.default.name: self.default}
        errors: list[str] = []
        if self.directory.is_dir():
            for path in sorted(self.directory.glob("*.md")):
                try:
                    p = parse_profile(path.read_text(encoding="utf-8"), path.stem)
                except (OSError, UnicodeDecodeError) as exc:
                    errors.append(f"{path.name}: {exc}")
                    continue
                if not p.system_prompt:
                    p = Profile(p.name, self.default.system_prompt, p.model, p.tools, p.description)
                found[p.name] = p
        self._profiles, self.errors = found, errors
        for e in errors:
            log.warning("profile not loaded: %s", e)
        return len(found)

    def get(self, name: str) -> Profile:
        fallback = self._profiles.get(self.default.name, self.default)
        return self._profiles.get(name.strip().lower(), fallback) if name else fallback

    def has(self, name: str) -> bool:
        return name.strip().lower() in self._profiles

    def all(self) -> list[Profile]:
        return sorted(self._profiles.values(), key=lambda p: p.name)
