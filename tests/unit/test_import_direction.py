"""agent_core never imports a platform SDK, channels/ or bots/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = (
    "telegram",
    "slack_sdk",
    "slack_bolt",
    "discord",
    "channels",
    "bots",
    "starlette",
    "uvicorn",
)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_agent_core_sources_import_no_platform_code() -> None:
    offenders = {}
    for path in (ROOT / "agent_core").rglob("*.py"):
        bad = _imports(path) & set(FORBIDDEN)
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_importing_all_of_agent_core_loads_no_platform_sdk() -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "import agent_core\n"
        "for m in pkgutil.walk_packages(agent_core.__path__, 'agent_core.'):\n"
        "    importlib.import_module(m.name)\n"
        f"bad = sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == ""
