"""The bot token's scopes against what Parley uses (read from ``auth.test``).

Slack reports a token's scopes in the ``x-oauth-scopes`` header of every Web API
answer.  An app created from an older manifest, or with scopes unticked, works
partly: each missing scope costs one feature, quietly.  The start-up log names
what is missing, and so does ``parley doctor``.
"""

from __future__ import annotations

from collections.abc import Mapping

# scope -> what goes missing without it (the manifests in deploy/ grant all of them)
NEEDED: dict[str, str] = {
    "chat:write": "no answers at all",
    "app_mentions:read": "mentions in channels are not received",
    "im:history": "direct messages are not received",
    "channels:history": "thread replies in public channels are not received",
    "groups:history": "thread replies in private channels are not received",
    "reactions:write": "no 'working' reaction while a turn runs",
    "files:read": "photos, text files, PDFs and Word, Excel or PowerPoint files people post are not read",
    "users:read": "the model does not see who said what in a channel",
}


def granted(headers: Mapping[str, str] | None) -> frozenset[str] | None:
    """The token's scopes from an answer's headers (None: Slack did not say)."""
    for k, v in (headers or {}).items():
        if k.lower() == "x-oauth-scopes":
            value = v[0] if isinstance(v, list) else v
            return frozenset(s.strip() for s in str(value).split(",") if s.strip())
    return None


def missing(scopes: frozenset[str] | None) -> list[str]:
    """'scope: what goes missing' for each needed scope the token lacks."""
    if scopes is None:
        return []
    return [f"{s}: {why}" for s, why in NEEDED.items() if s not in scopes]
