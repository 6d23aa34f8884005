"""One page of the fake Slack's conversations.history / .replies answers."""

from __future__ import annotations

from typing import Any


def listing(args: dict[str, Any], msgs: list[Any]) -> dict[str, Any]:
    """A page of ``msgs`` (the fake's Message objects, in answer order) as Slack
    gives it: ``oldest``, ``limit`` and ``cursor`` applied, deleted messages left
    out, metadata only with ``include_all_metadata``."""
    oldest = float(args.get("oldest") or 0)
    with_meta = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
    msgs = [m for m in msgs if not m.deleted and float(m.ts) > oldest]
    start = int(args.get("cursor") or 0)
    limit = min(int(args.get("limit") or 100), 1000)
    out = []
    for m in msgs[start : start + limit]:
        item: dict[str, Any] = {"type": "message", "ts": m.ts, "text": m.text, "user": m.user}
        if m.thread_ts:
            item["thread_ts"] = m.thread_ts
        if with_meta and m.metadata is not None:
            item["metadata"] = m.metadata
        out.append(item)
    more = start + limit < len(msgs)
    return {
        "messages": out,
        "has_more": more,
        "response_metadata": {"next_cursor": str(start + limit) if more else ""},
    }
