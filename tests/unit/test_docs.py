"""The docs name every setting a user can set (so no option is undocumented)."""

from __future__ import annotations

from pathlib import Path

from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings
from bots.settings import PLATFORMS, _channel_module
from channels.web.channel import WebSettings

ROOT = Path(__file__).resolve().parents[2]


def _all_docs() -> str:
    parts = [(ROOT / "README.md").read_text()]
    parts += [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    parts += [p.read_text() for p in sorted((ROOT / "deploy").glob("*.md"))]
    return "\n".join(parts)


def test_every_setting_is_documented() -> None:
    classes: list[type] = [CoreSettings, LLMSettings, WebSettings]
    for name in PLATFORMS:
        mod = _channel_module(name)
        if mod is not None:
            classes.append(mod.SETTINGS)
    docs = _all_docs()
    missing = []
    for cls in classes:
        for field, info in cls.model_fields.items():  # type: ignore[attr-defined]
            env = (info.alias or field).upper()
            if f"`{env}`" not in docs and f"{env}=" not in docs and f"| {env} " not in docs:
                missing.append(f"{cls.__name__}.{env}")
    assert missing == []


def test_readme_names_the_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "./scripts/start.sh" in readme
    assert "./scripts/test.sh" in readme
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_quick_start_says_a_platform_token_turns_the_web_chat_off() -> None:
    """README's quick start read as if the web chat and the platforms ran together;
    a platform token turns the chat off (quoted as the start-up summary says it)."""
    from channels.web import channel as web_channel

    readme = (ROOT / "README.md").read_text()
    start = readme.index("./scripts/start.sh")
    quick = readme[start : readme.index("Run every check", start)]
    _, why = web_channel.status(WebSettings(), ["telegram"])
    assert f"web: off ({why})" in " ".join(quick.split()), quick
