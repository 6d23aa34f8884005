"""Loop detection: is the model going round in circles with its tools?

A sliding window of the last 30 calls, each keyed by tool name + SHA-256 of
its canonical JSON arguments, with a hash of its result.  Four detectors:

* **repeat**     the same call N times in the window           (warn 10, critical 20)
* **poll**       the same call returning the same result in a
                 row (polling with no progress)                (warn 10, critical 20)
* **ping-pong**  two calls alternating A, B, A, B ...          (warn 10, critical 20)
* **breaker**    any single call 30 times in the turn          (hard stop)

A warning becomes a note to the LLM next to the tool result; a critical level
stops the turn with a short message to the user.  The state is a small JSON
value kept with the turn (and in the session across an approval wait).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import orjson

WINDOW = 30
WARN = 10
CRITICAL = 20
HARD_STOP = 30


class Level(IntEnum):
    OK = 0
    WARN = 1
    CRITICAL = 2


def call_key(name: str, arguments: dict[str, Any]) -> str:
    canon = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
    return f"{name}:{hashlib.sha256(canon).hexdigest()[:32]}"


def result_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Verdict:
    level: Level
    message: str = ""
    pattern: str = ""


@dataclass
class LoopGuard:
    window: list[tuple[str, str]] = field(default_factory=list)  # (call key, result hash)
    totals: Counter[str] = field(default_factory=Counter)
    warned: set[str] = field(default_factory=set)

    def record(self, name: str, arguments: dict[str, Any], result: str) -> Verdict:
        key = call_key(name, arguments)
        self.window.append((key, result_hash(result)))
        del self.window[:-WINDOW]
        self.totals[key] += 1
        return self._judge(name, key)

    def _judge(self, name: str, key: str) -> Verdict:
        if self.totals[key] >= HARD_STOP:
            return Verdict(
                Level.CRITICAL,
                f"`{name}` was called {self.totals[key]} times with the same arguments",
            )
        verdicts = [self._repeat(name, key), self._poll(name), self._ping_pong()]
        worst = max(verdicts, key=lambda v: v.level)
        if worst.level is Level.WARN:
            if worst.pattern in self.warned:
                return Verdict(Level.OK)  # one note per pattern
            self.warned.add(worst.pattern)
        return worst

    def _repeat(self, name: str, key: str) -> Verdict:
        n = sum(1 for k, _ in self.window if k == key)
        return _level(n, f"`{name}` was called {n} times with the same arguments", "r:" + key)

    def _poll(self, name: str) -> Verdict:
        last = self.window[-1]
        n = 0
        for item in reversed(self.window):
            if item != last:
                break
            n += 1
        return _level(n, f"`{name}` returned the same result {n} times in a row", "p:" + last[0])

    def _ping_pong(self) -> Verdict:
        w = self.window
        if len(w) < 4:
            return Verdict(Level.OK)
        a, b = w[-1][0], w[-2][0]
        if a == b:
            return Verdict(Level.OK)
        n = 0
        for i in range(len(w) - 1, -1, -1):
            if w[i][0] != (a if (len(w) - 1 - i) % 2 == 0 else b):
                break
            n += 1
        return _level(n, f"two calls alternated {n} times without progress", "pp:" + min(a, b))

    # persisted across an approval wait
    def to_dict(self) -> dict[str, Any]:
        return {
            "w": [list(x) for x in self.window],
            "t": dict(self.totals),
            "s": sorted(self.warned),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> LoopGuard:
        if not d:
            return cls()
        return cls(
            [(k, r) for k, r in d.get("w", ())], Counter(d.get("t", {})), set(d.get("s", ()))
        )


def _level(n: int, message: str, pattern: str) -> Verdict:
    if n >= CRITICAL:
        return Verdict(Level.CRITICAL, message, pattern)
    if n >= WARN:
        return Verdict(Level.WARN, message, pattern)
    return Verdict(Level.OK)
