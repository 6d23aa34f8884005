"""EVENT_LOOP: which event loop a choice means on this machine (one answer for the
CLI, `parley doctor` and the bench)."""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version


def uvloop_problem() -> str | None:
    """Why uvloop cannot be used here ("not installed", or the import's error, one
    line: a broken or mismatched build), else None.  It is imported, not only looked
    for: a uvloop that is there and fails to import must not end `parley run`."""
    try:
        importlib.import_module("uvloop")
    except ModuleNotFoundError as exc:
        if exc.name == "uvloop":
            return "not installed"
        return f"installed but cannot be imported ({_one_line(exc)})"
    except Exception as exc:  # an ImportError (undefined symbol ...), or its init failing
        return f"installed but cannot be imported ({_one_line(exc)})"
    return None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"


def uvloop_version() -> str | None:
    """uvloop's version if it can be imported here, else None."""
    if uvloop_problem() is not None:
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
