"""The fake Slack's ``files.info``, and files as Slack Connect puts them in events.

A file shared from another organisation (Slack Connect) reaches the app as its id
only, ``{"id": "F…", "mode": "file_access", "file_access": "check_file_info"}``:
no name, type, size or address until the app asks ``files.info`` (scope
``files:read``), which answers the whole file object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def connect_stub(file_obj: dict[str, Any]) -> dict[str, Any]:
    """``file_obj`` (from :meth:`FakeSlack.add_file`) as a Slack Connect event carries it."""
    return {
        "id": file_obj["id"],
        "mode": "file_access",
        "file_access": "check_file_info",
        "created": file_obj["created"],
        "timestamp": file_obj["timestamp"],
        "user": "",
    }


def files_info(
    objects: dict[str, dict[str, Any]],
    args: dict[str, Any],
    *,
    files_read: bool,
    fault: Callable[[str], Exception],
) -> dict[str, Any]:
    """``files.info``: the file's whole object (``fault(error)`` is raised otherwise)."""
    if not files_read:
        raise fault("missing_scope")
    obj = objects.get(str(args.get("file", "")))
    if obj is None:
        raise fault("file_not_found")
    return {"file": obj, "comments": [], "response_metadata": {"next_cursor": ""}}
