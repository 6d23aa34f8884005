"""A thread's session: its history and settings, stored as versioned JSON.

The session lives in one Redis hash per thread (``v`` version, ``d`` JSON) and
is only written by the holder of the thread's lock, version-checked, so a lost
update is detected (:class:`~agent_core.errors.VersionConflict`), never silent.

History kept here is bounded (``max_history_messages`` and compaction), so
loading and saving a session costs the same on day 1 and day 300.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import orjson

from agent_core.agent.loop import NUDGE
from agent_core.llm.base import ChatMessage, TokenUsage


def starts_turn(m: ChatMessage) -> bool:
    """Does ``m`` open a turn: a person's message, not one added inside a running
    turn (the loop's nudge, a message taken in mid-turn)?  Compaction and trimming
    cut only here, so a cut never drops the request the current turn answers.  A
    nudge stored before messages were marked is known by its text."""
    return m.role == "user" and not m.mid_turn and m.content != NUDGE


def mid_turn(m: ChatMessage) -> ChatMessage:
    """``m`` marked as taken in by a running turn (no turn start of its own)."""
    return replace(m, mid_turn=True) if m.role == "user" and not m.mid_turn else m


class ThreadState(StrEnum):
    IDLE = "idle"
    PROCESSING = "processing"
    AWAITING_APPROVAL = "awaiting_approval"


@dataclass
class Session:
    thread: str
    history: list[ChatMessage] = field(default_factory=list)
    state: ThreadState = ThreadState.IDLE
    model: str = ""  # per-session model override ('' = default)
    profile: str = ""  # agent profile name ('' = default)
    # "Always" presses, as "<requester>|<tool>": one person's standing approval of a
    # tool, never anyone else's in a group (a bare tool name, from before, counts for none)
    always_approved: set[str] = field(default_factory=set)
    pending_approval: str = ""  # approval id while AWAITING_APPROVAL
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    turns: int = 0
    conversation: int = 1  # bumped by /new
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)  # room for later features
    # where the loop stopped for an approval: the calls of that LLM response, the
    # results already known, the loop-guard state and iteration (see agent.turn)
    resume: dict[str, Any] = field(default_factory=dict)
    held: list[dict[str, Any]] = field(default_factory=list)  # events kept while awaiting
    summary: str = ""  # summary of compacted-away history (goes into the system prompt)
    token_ratio: float = 1.0  # real prompt tokens / estimate (calibration)
    last_prompt_tokens: int = 0  # as reported by the provider on the last call
    version: int = 0  # not serialised: the Redis hash carries it

    def to_json(self) -> bytes:
        u = self.usage
        d: dict[str, Any] = {
            "t": self.thread,
            "h": [m.to_dict() for m in self.history],
            "s": self.state.value,
            "u": [u.input, u.output, u.cache_read, u.cache_write, u.total],
            "c": self.cost_usd,
            "n": self.turns,
            "cv": self.conversation,
            "ca": self.created_at,
            "ua": self.updated_at,
        }
        if self.model:
            d["m"] = self.model
        if self.profile:
            d["p"] = self.profile
        if self.always_approved:
            d["aa"] = sorted(self.always_approved)
        if self.pending_approval:
            d["pa"] = self.pending_approval
        if self.extra:
            d["x"] = self.extra
        if self.resume:
            d["rs"] = self.resume
        if self.held:
            d["hd"] = self.held
        if self.summary:
            d["sm"] = self.summary
        if self.token_ratio != 1.0:
            d["tr"] = self.token_ratio
        if self.last_prompt_tokens:
            d["lp"] = self.last_prompt_tokens
        return orjson.dumps(d)

    @classmethod
    def from_json(cls, raw: bytes | str, version: int = 0) -> Session:
        d = orjson.loads(raw)
        u = d.get("u") or [0, 0, 0, 0, 0]
        return cls(
            thread=d["t"],
            history=[ChatMessage.from_dict(m) for m in d.get("h", ())],
            state=ThreadState(d.get("s", "idle")),
            model=d.get("m", ""),
            profile=d.get("p", ""),
            always_approved=set(d.get("aa", ())),
            pending_approval=d.get("pa", ""),
            usage=TokenUsage(*u),
            cost_usd=d.get("c", 0.0),
            turns=d.get("n", 0),
            conversation=d.get("cv", 1),
            created_at=d.get("ca", 0.0),
            updated_at=d.get("ua", 0.0),
            extra=d.get("x", {}),
            resume=d.get("rs", {}),
            held=d.get("hd", []),
            summary=d.get("sm", ""),
            token_ratio=d.get("tr", 1.0),
            last_prompt_tokens=d.get("lp", 0),
            version=version,
        )

    def always_tools(self, requester: str) -> set[str]:
        """The tools ``requester`` approved with "Always" in this conversation."""
        prefix = requester + "|"
        return {e.removeprefix(prefix) for e in self.always_approved if e.startswith(prefix)}

    def grant_always(self, requester: str, tool: str) -> None:
        self.always_approved.add(f"{requester}|{tool}")

    @classmethod
    def load(cls, thread: str, version: int, data: bytes | None) -> Session:
        if data is None:
            return cls(thread=thread, version=version)
        return cls.from_json(data, version)

    def trim(self, max_messages: int) -> list[ChatMessage]:
        """Drop the oldest messages beyond ``max_messages``; return what was dropped.

        Cuts where a turn starts (:func:`starts_turn`, as compaction does), so the kept
        history starts with the user, as providers require (Anthropic refuses a
        first message from the assistant).  When the last turn alone is longer than
        the limit it is kept whole, up to twice the limit; beyond that (a long run
        of routine notes) the cut skips tool results only, and the request is
        mended when it is built (``context.request_messages``).
        """
        h = self.history
        if len(h) <= max_messages:
            return []
        cut = len(h) - max_messages
        later = next((i for i in range(cut, len(h)) if starts_turn(h[i])), None)
        if later is not None:
            cut = later
        else:
            turn = next((i for i in range(cut - 1, -1, -1) if starts_turn(h[i])), None)
            if turn is not None and len(h) - turn <= 2 * max_messages:
                cut = turn
            while cut < len(h) and h[cut].role == "tool":
                cut += 1
        dropped, self.history = h[:cut], h[cut:]
        return dropped
