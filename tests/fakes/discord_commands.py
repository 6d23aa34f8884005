"""Global application (slash) commands in the fake Discord: Discord's checks and
what it stores and answers (``GET|PUT /applications/{app}/commands``).

A bulk overwrite (PUT) is checked as Discord does and refused whole, with
Discord's error shape (400, code 50035 ``Invalid Form Body``, ``errors`` keyed by
the position of the bad command and field): a name that is not 1-32 lower-case
letters, digits, ``-`` or ``_``; a description outside 1-100 characters; more than
100 commands or 25 options; two commands with one name.  What it stores carries
the fields Discord adds (id, kept for a command whose name stays; version,
application id, contexts, ...), so a client must compare only what it sets.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

MAX_COMMANDS = 100
MAX_OPTIONS = 25


def invalid_form(errors: dict[str, Any]) -> dict[str, Any]:
    return {"code": 50035, "errors": errors, "message": "Invalid Form Body"}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"_errors": [{"code": code, "message": message}]}


def _name_ok(name: Any) -> bool:
    return (
        isinstance(name, str)
        and 1 <= len(name) <= 32
        and name == name.lower()
        and all(c in "-_" or unicodedata.category(c)[0] in "LN" for c in name)
    )


def _description_ok(text: Any) -> bool:
    return isinstance(text, str) and 1 <= len(text) <= 100


def _check_fields(item: Any, what: str) -> dict[str, Any]:
    """Errors of one command or option (``what``: "Command" | "Option"; empty: fine)."""
    if not isinstance(item, dict):
        return _error("DICT_TYPE_CONVERT", "Only dictionaries may be used in a DictType")
    errors: dict[str, Any] = {}
    if not _name_ok(item.get("name")):
        code = "APPLICATION_COMMAND_INVALID_NAME" if what == "Command" else "INVALID_NAME"
        errors["name"] = _error(code, f"{what} name is invalid")
    if not _description_ok(item.get("description")):
        errors["description"] = _error(
            "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
        )
    return errors


def check_commands(body: Any) -> dict[str, Any] | None:
    """Discord's 400 body for a bulk overwrite it refuses, or None."""
    if not isinstance(body, list):
        return invalid_form(_error("LIST_TYPE_CONVERT", "Only iterables may be used in a ListType"))
    if len(body) > MAX_COMMANDS:
        return invalid_form(_error("BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length."))
    errors: dict[str, Any] = {}
    for i, cmd in enumerate(body):
        found = _check_fields(cmd, "Command")
        options = (cmd.get("options") or []) if isinstance(cmd, dict) else []
        if len(options) > MAX_OPTIONS:
            found["options"] = _error("BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
        else:
            bad = {str(j): e for j, o in enumerate(options) if (e := _check_fields(o, "Option"))}
            if bad:
                found["options"] = bad
        if found:
            errors[str(i)] = found
    if errors:
        return invalid_form(errors)
    names = [cmd["name"] for cmd in body]
    if len(set(names)) != len(names):
        return invalid_form(
            _error(
                "APPLICATION_COMMANDS_DUPLICATE_NAME", "Application command names must be unique"
            )
        )
    return None


def stored_commands(
    app_id: str, body: list[dict[str, Any]], old: list[dict[str, Any]], new_id: Callable[[], str]
) -> list[dict[str, Any]]:
    """The commands as Discord keeps and returns them after a bulk overwrite."""
    ids = {c["name"]: c["id"] for c in old}
    out = []
    for cmd in body:
        stored: dict[str, Any] = {
            "id": ids.get(cmd["name"]) or new_id(),
            "application_id": app_id,
            "version": new_id(),
            "default_member_permissions": None,
            "type": int(cmd.get("type") or 1),
            "name": cmd["name"],
            "name_localizations": None,
            "description": cmd["description"],
            "description_localizations": None,
            "dm_permission": True,
            "contexts": [0, 1, 2],
            "integration_types": [0],
            "nsfw": False,
        }
        if cmd.get("options"):
            stored["options"] = [
                {
                    "type": int(o.get("type") or 3),
                    "name": o["name"],
                    "description": o["description"],
                    **({"required": True} if o.get("required") else {}),
                }
                for o in cmd["options"]
            ]
        out.append(stored)
    return out
