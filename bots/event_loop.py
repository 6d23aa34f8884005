"""EVENT_LOOP: which event loop a choice means on this machine (one answer for the
CLI, `parley doctor` and the bench)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version


def uvloop_version() -> str | None:
    """uvloop's version if it can be imported here, else None."""
    try:
        if importlib.util.find_spec("uvloop") is None:
            return None
    except ValueError:  # sys.modules["uvloop"] is None: imports of it fail
        return None
    try:
        return version("uvloop")
    except PackageNotFoundError:
        return "?"


def pick(choice: str) -> str | None:
    """``"uvloop"`` or ``"asyncio"`` for an EVENT_LOOP value; None when uvloop is
    asked for and cannot be imported."""
    if choice == "asyncio":
        return "asyncio"
    if uvloop_version() is not None:
        return "uvloop"
    return None if choice == "uvloop" else "asyncio"
