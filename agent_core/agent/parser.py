"""The submission parser: what did the user send? Runs before anything else.

* ``/name args`` (also ``/name@botname args``, as Telegram sends in groups) ->
  :class:`Command`;
* anything else -> :class:`Text`.

Approval words are recognised here too once a thread awaits a decision (see
``parse(text, awaiting_approval=True)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CMD = re.compile(r"^/([A-Za-z][A-Za-z0-9_\-]{0,31})(?:@[A-Za-z0-9_]+)?(?:\s+(.*))?$", re.DOTALL)

APPROVE_WORDS = frozenset({"yes", "y", "approve", "approved", "ok", "okay"})
ALWAYS_WORDS = frozenset({"always", "a"})
DENY_WORDS = frozenset({"no", "n", "deny", "denied"})


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str = ""


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class ApprovalReply:
    decision: str  # approve | always | deny
    reason: str = ""


Submission = Command | Text | ApprovalReply


def parse(text: str, *, awaiting_approval: bool = False) -> Submission:
    stripped = text.strip()
    m = _CMD.match(stripped)
    if m:
        return Command(m.group(1).lower(), (m.group(2) or "").strip())
    if awaiting_approval:
        words = stripped.split(None, 1)
        if words:
            first = words[0].lower().rstrip(".,!")
            rest = words[1] if len(words) > 1 else ""
            if first in APPROVE_WORDS and not rest:
                return ApprovalReply("approve")
            if first in ALWAYS_WORDS and not rest:
                return ApprovalReply("always")
            if first in DENY_WORDS:
                reason = rest.removeprefix("because").strip() if rest else ""
                if not rest or rest.lower().startswith("because"):
                    return ApprovalReply("deny", reason)
    return Text(text)


def is_command(text: str) -> bool:
    return bool(_CMD.match(text.strip()))
