"""Block Kit in the fake Slack: what ``chat.postMessage`` / ``chat.update``
accept (Slack's limits on blocks, action ids, button labels and values), and the
``block_actions`` payload a press on a stored message's button sends."""

from __future__ import annotations

import time
from typing import Any

import orjson


class SlackApiFault(Exception):
    def __init__(self, error: str) -> None:
        self.error = error


def _check_blocks(blocks: Any) -> None:
    if blocks in (None, "", []):
        return
    if isinstance(blocks, str):
        blocks = orjson.loads(blocks)
    if not isinstance(blocks, list) or len(blocks) > 50:
        raise SlackApiFault("invalid_blocks")
    for b in blocks:
        if not isinstance(b, dict) or "type" not in b:
            raise SlackApiFault("invalid_blocks")
        if b.get("block_id") is not None and len(str(b["block_id"])) > 255:
            raise SlackApiFault("invalid_blocks")
        if b["type"] == "section":
            text = (b.get("text") or {}).get("text", "")
            if not text or len(text) > 3000:
                raise SlackApiFault("invalid_blocks")
        elif b["type"] == "actions":
            els = b.get("elements") or []
            if not els or len(els) > 25:
                raise SlackApiFault("invalid_blocks")
            ids = set()
            for el in els:
                aid = str(el.get("action_id", ""))
                if len(aid) > 255 or aid in ids:
                    raise SlackApiFault("invalid_blocks")
                ids.add(aid)
                if el.get("type") == "button":
                    if len(str(el.get("value", ""))) > 2000:
                        raise SlackApiFault("invalid_blocks")
                    label = (el.get("text") or {}).get("text", "")
                    if not label or len(label) > 75:
                        raise SlackApiFault("invalid_blocks")
                    if el.get("style") not in (None, "primary", "danger"):
                        raise SlackApiFault("invalid_blocks")


def block_actions(
    m: Any,
    channel: str,
    label: str,
    *,
    user: str,
    team: str,
    trigger_id: str,
    response_url: str,
) -> dict[str, Any]:
    """The block_actions payload for pressing the button ``label`` on the fake's
    stored message ``m`` (its ``ts``, ``text``, ``blocks``, ``user``, ``thread_ts``)."""
    ts = m.ts
    for block in m.blocks:
        for el in block.get("elements", ()) if block.get("type") == "actions" else ():
            if el.get("text", {}).get("text") == label:
                return {
                    "type": "block_actions",
                    "user": {
                        "id": user,
                        "username": user.lower(),
                        "name": user.lower(),
                        "team_id": team,
                    },
                    "api_app_id": "A0FAKE",
                    "team": {"id": team, "domain": "fake"},
                    "container": {
                        "type": "message",
                        "message_ts": ts,
                        "channel_id": channel,
                        "is_ephemeral": False,
                        **({"thread_ts": m.thread_ts} if m.thread_ts else {}),
                    },
                    "trigger_id": trigger_id,
                    "channel": {"id": channel, "name": "somewhere"},
                    "message": {
                        "type": "message",
                        "ts": ts,
                        "text": m.text,
                        "blocks": m.blocks,
                        "user": m.user,
                        **({"thread_ts": m.thread_ts} if m.thread_ts else {}),
                    },
                    "response_url": response_url,
                    "actions": [
                        {
                            "action_id": el["action_id"],
                            "block_id": block.get("block_id", ""),
                            "text": el["text"],
                            "value": el.get("value", ""),
                            "style": el.get("style", ""),
                            "type": "button",
                            "action_ts": f"{time.time():.6f}",
                        }
                    ],
                }
    raise KeyError(f"no button {label!r} on {channel}/{ts}")
