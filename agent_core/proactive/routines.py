"""Routines: what runs on its own, when, and what it does; stored in Redis.

A routine has one trigger and one action:

* trigger ``cron`` (a croniter expression in a timezone), ``event`` (a regex on
  incoming messages of a channel, with a cooldown, a limit on runs in flight
  and an optional dedup window) or ``manual`` (only `/routine run`);
* action ``light`` (one LLM call with the prompt; ``ROUTINE_OK`` means stay
  silent, anything else is sent to the notify target) or ``full`` (the prompt
  is submitted to the target's thread as a message, so it runs through the
  agent loop with tools, approvals as buttons in that chat).

Routines are validated on creation (a bad cron expression, timezone, regex or
target is refused with the reason) and stored as JSON in one Redis hash; each
fire is recorded (last run, outcome, duration, and the last few runs).
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
from croniter import croniter
from redis.asyncio import Redis
from redis.exceptions import WatchError

from agent_core.events import CHANNELS, ThreadKey
from agent_core.proactive.targets import TargetError, parse_target, retarget
from agent_core.store import keys, scripts
from agent_core.store.scripting import run_script

TRIGGERS = ("cron", "event", "manual")
ACTIONS = ("light", "full")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
ROUTINE_OK = "ROUTINE_OK"
MAX_WINDOW_SECS = 30 * 86_400  # cooldown / dedup windows: at most 30 days
MIN_WINDOW_SECS = 0.001  # ... and, when set, at least 1 ms (Redis SET PX >= 1)
MAX_CONCURRENT = 1_000  # --max: runs of one routine at once (a 64-bit overflow beyond)


class RoutineError(ValueError):
    """A routine that cannot be created as asked (the message says why)."""


@dataclass
class Routine:
    name: str  # the id: lowercase letters, digits, - and _
    trigger: str  # cron | event | manual
    prompt: str
    action: str = "light"  # light | full
    notify: str = ""  # target (see targets.py); required
    cron: str = ""
    tz: str = "UTC"
    channel: str = "*"  # event: the channel whose messages are watched ('*' = all)
    pattern: str = ""  # event: regex (case-insensitive, searched anywhere)
    cooldown_secs: float = 300.0
    max_concurrent: int = 1
    dedup_secs: float = 0.0  # event: the same text within this window triggers once
    enabled: bool = True
    created_by: str = ""
    created_at: float = field(default_factory=time.time)

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> Routine:
        d = orjson.loads(raw)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def describe_trigger(self) -> str:
        if self.trigger == "cron":
            return f"cron `{self.cron}` ({self.tz})"
        if self.trigger == "event":
            extra = f", dedup {self.dedup_secs:g}s" if self.dedup_secs else ""
            return (
                f"event /{self.pattern}/ on {self.channel} (cooldown {self.cooldown_secs:g}s, "
                f"max {self.max_concurrent} at once{extra})"
            )
        return "manual"

    def next_fire(self, after: float) -> float:
        """The first scheduled time strictly after ``after`` (epoch seconds).

        When clocks go back, a wall-clock time repeats; a routine with a fixed hour
        fires at its first occurrence only (as cron does), not twice.
        """
        tz = ZoneInfo(self.tz)
        start = datetime.fromtimestamp(after, tz)
        it = croniter(self.cron, start)
        nxt = float(it.get_next(float))
        # As cron does: a job whose hour field is a wildcard runs by elapsed time
        # (in both copies of a repeated hour); one with a fixed hour skips every
        # time in the second copy (fold=1), whatever its minutes.
        cron = _ALIASES.get(self.cron.strip().lower(), self.cron)
        fixed_hour = not cron.split()[1].startswith("*")
        while fixed_hour and datetime.fromtimestamp(nxt, tz).fold == 1:
            nxt = float(it.get_next(float))
        return nxt


# croniter's @-aliases, spelled out (for the fixed-hour test above)
_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


_CRON_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("weekday", "0-7 or sun-sat"),
)


def _cron_reason(cron: str) -> str:
    """Why croniter refuses ``cron`` (five fields, or an @-alias), naming the field."""
    words = cron.split()
    if len(words) != 5:
        return "unknown @-alias (@hourly, @daily, @weekly, @monthly, @yearly)"
    for i, (name, allowed) in enumerate(_CRON_FIELDS):
        probe = ["*"] * 5
        probe[i] = words[i]
        try:
            croniter(" ".join(probe))
        except Exception as exc:  # croniter's own errors: which, and why
            why = str(exc).rpartition("]")[2].strip()
            if "step" in why:
                return f"the {name} field {words[i]!r} has a step of 0 (a step is 1 or more)"
            if "range" in why:
                return f"the {name} field {words[i]!r} is out of range ({allowed})"
            return f"the {name} field {words[i]!r} is not valid ({allowed})"
    try:  # each field alone is fine: croniter refuses them together
        croniter(cron)
    except Exception as exc:
        return str(exc).rpartition("]")[2].strip() or type(exc).__name__
    return "croniter refuses it"


def validate(r: Routine, tenants: dict[str, str] | None = None) -> Routine:
    """Check every field; raise RoutineError with a readable reason."""
    r.name = r.name.strip().lower()
    if not NAME_RE.match(r.name):
        raise RoutineError(
            f"name {r.name!r}: use 1-40 lowercase letters, digits, - or _ (starting with one)"
        )
    if r.trigger not in TRIGGERS:
        raise RoutineError(f"trigger must be one of {', '.join(TRIGGERS)}")
    if r.action not in ACTIONS:
        raise RoutineError(f"action must be one of {', '.join(ACTIONS)}")
    if not r.prompt.strip():
        raise RoutineError("the prompt is empty")
    if not r.notify.strip():
        raise RoutineError("a notify target is required (e.g. telegram:123456)")
    try:
        # with a placeholder tenant: whether the tenant is known is checked when sending
        parse_target(r.notify, {**(tenants or {}), "telegram": "x", "slack": "x"})
    except TargetError as exc:
        raise RoutineError(str(exc)) from None
    if r.trigger == "cron":
        try:
            ZoneInfo(r.tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise RoutineError(f"unknown timezone {r.tz!r} (e.g. Europe/Paris, UTC)") from None
        alias = r.cron.strip().startswith("@") and " " not in r.cron.strip()
        five = len(r.cron.split()) == 5 or alias
        if not r.cron.strip() or not five:
            raise RoutineError(
                f"bad cron expression {r.cron!r} (five fields: minute hour day month weekday, "
                "e.g. '0 9 * * 1-5')"
            )
        if not croniter.is_valid(r.cron):
            raise RoutineError(f"bad cron expression {r.cron!r}: {_cron_reason(r.cron)}")
        r.cron = " ".join(r.cron.split())
        try:
            r.next_fire(time.time())
        except Exception:  # croniter: no such date within its search horizon
            raise RoutineError(
                f"cron expression {r.cron!r} never fires (e.g. February 30)"
            ) from None
    if r.trigger == "event":
        if not r.pattern:
            raise RoutineError("an event routine needs a pattern (a regular expression)")
        try:
            re.compile(r.pattern, re.IGNORECASE)
        except re.error as exc:
            raise RoutineError(f"bad regular expression {r.pattern!r}: {exc}") from None
        if r.channel != "*" and r.channel not in CHANNELS:
            raise RoutineError(f"channel must be * or one of {', '.join(CHANNELS)}")
    for what, secs in (("cooldown", r.cooldown_secs), ("dedup", r.dedup_secs)):
        if not math.isfinite(secs) or not 0 <= secs <= MAX_WINDOW_SECS:
            raise RoutineError(f"the {what} window must be 0 to {MAX_WINDOW_SECS:,} seconds")
        if 0 < secs < MIN_WINDOW_SECS:  # Redis keeps a key 1 ms at least (SET PX)
            raise RoutineError(
                f"the {what} window must be 0 (none) or at least {MIN_WINDOW_SECS:g} s "
                f"(1 ms); {secs:g} s is too short"
            )
    if not 1 <= r.max_concurrent <= MAX_CONCURRENT:
        raise RoutineError(
            f"max concurrent runs (--max) must be at least 1 and at most {MAX_CONCURRENT:,}"
        )
    return r


# --- parsing `/routine add` and `parley routines add` ---------------------------
ADD_USAGE = (
    "NAME (--cron 'EXPR' [--tz ZONE] | --event REGEX [--channel CH] [--cooldown S] "
    "[--max N] [--dedup S] | --manual) [--full] --notify TARGET [--] PROMPT..."
)

_FLAGS = {
    "--cron": "cron",
    "--tz": "tz",
    "--event": "pattern",
    "--channel": "channel",
    "--cooldown": "cooldown_secs",
    "--max": "max_concurrent",
    "--dedup": "dedup_secs",
    "--notify": "notify",
}


KNOWN_FLAGS = (*_FLAGS, "--manual", "--full", "--light")


_QUOTES = {'"': '"', "'": "'", "“": "”", "”": "”", "‘": "’", "’": "’", "„": "“"}
_DASHES = ("—", "–")  # phones turn -- into a dash


def _token(text: str, i: int) -> tuple[str, int]:
    """The word at ``text[i]`` (not whitespace) and where it ends: a quoted value
    (``'0 9 * * 1-5'``, “…”) is read to its closing quote, verbatim (a backslash
    stays a backslash); anything else runs to the next whitespace."""
    close = _QUOTES.get(text[i])
    if close is not None:
        end = text.find(close, i + 1)
        if end < 0 and close in "”’":  # a straight closing quote after a curly opening one
            end = text.find('"' if close == "”" else "'", i + 1)
        if end < 0:
            raise RoutineError(f"no closing quote for the value at {text[i : i + 20]!r}")
        return text[i + 1 : end], end + 1
    end = i
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[i:end], end


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _unwrap(prompt: str) -> str:
    """A prompt typed whole in quotes loses them (``"Summarise it"``); one with
    quotes inside (``Bob's and Alice's``) is kept as typed."""
    close = _QUOTES.get(prompt[:1])
    if close is None or len(prompt) < 2 or prompt[-1] not in (close, prompt[0]):
        return prompt
    inner = prompt[1:-1]
    return prompt if prompt[0] in inner or prompt[-1] in inner else inner


def _dashed(word: str) -> str:
    for dash in _DASHES:
        if word.startswith(dash):
            return "--" + word[len(dash) :]
    return word


def _option_words(text: str) -> tuple[list[str], int, bool]:
    """The name and the options of a ``/routine add`` text as words, where its
    prompt starts (-1: no prompt), and whether a lone ``--`` came before it.  The
    prompt starts at the first word that is not an option or an option's value, or
    after a lone ``--``."""
    words: list[str] = []
    i = _skip_space(text, 0)
    if i >= len(text):
        return words, -1, False
    name, i = _token(text, i)
    words.append(name)
    while (i := _skip_space(text, i)) < len(text):
        try:
            raw, after = _token(text, i)
        except RoutineError:  # an apostrophe starting the prompt ('Tis, ’90s), no value
            return words, i, False
        w = _dashed(raw) if text[i] not in _QUOTES else raw
        if w == "--":
            return words, after, True
        if w in _FLAGS:
            words.append(w)
            i = _skip_space(text, after)
            if i < len(text):
                value, i = _token(text, i)
                words.append(value)
            continue
        if not w.startswith("--") or text[i] in _QUOTES:
            return words, i, False
        words.append(w)  # --manual, --full, --light, or an unknown option (refused)
        i = after
    return words, -1, False


_TRIGGER_FLAGS = ("--cron", "--event", "--manual")
_ONLY_FOR = {  # options that mean something for one trigger only
    "--tz": "cron",
    "--channel": "event",
    "--cooldown": "event",
    "--dedup": "event",
}
_CRON_WORD = re.compile(
    r"^(?:[0-9*?LW#/,-]+|(?:sun|mon|tue|wed|thu|fri|sat|jan|feb|mar|apr|may|jun|jul|aug|sep"
    r"|oct|nov|dec)(?:[-,/][a-z0-9]+)*)$",
    re.IGNORECASE,
)


def _one_of_each(given: list[str], trigger: str) -> None:
    """Refuse options that contradict each other instead of keeping the last one
    (two triggers) or ignoring one (``--tz`` on an event routine)."""
    triggers = [w for w in given if w in _TRIGGER_FLAGS]
    if len(triggers) > 1:
        twice = "; " + triggers[0] + " is given twice" if len(set(triggers)) == 1 else ""
        raise RoutineError(f"choose one of --cron, --event, --manual{twice}")
    actions = [w for w in given if w in ("--full", "--light")]
    if len(set(actions)) > 1:
        raise RoutineError("choose one of --full, --light")
    repeated = next((w for w in given if w in _FLAGS and given.count(w) > 1), None)
    if repeated is not None:
        raise RoutineError(f"{repeated} is given twice")
    for w in given:
        only = _ONLY_FOR.get(w)
        if only is not None and only != trigger:
            raise RoutineError(f"{w} applies only to --{only}; this routine is --{trigger}")


def _unquoted_cron(cron: str, prompt_words: Sequence[str], next_to_it: bool) -> None:
    """``--cron 0 9 * * 1-5`` typed without quotes: the expression's first field was
    taken as the value and the rest, right after it, as the prompt.  Say to quote it."""
    if (
        not next_to_it
        or len(cron.split()) != 1
        or cron.startswith("@")
        or not _CRON_WORD.match(cron)
    ):
        return
    rest = list(itertools.takewhile(_CRON_WORD.match, prompt_words[:4]))
    if not rest:
        return
    expr = " ".join([cron, *rest])
    raise RoutineError(
        f"the cron expression is several words: quote it, --cron '{expr}' "
        "(unquoted, only its first field was taken)"
    )


def parse_add(args: str | Sequence[str], *, created_by: str, default_tz: str = "UTC") -> Routine:
    """``NAME --cron '0 9 * * *' --notify telegram:1 Summarise ...`` -> a Routine.

    From a chat (``args`` a string) only the name and options are read as words (a
    quoted value is one word); the prompt is the rest of the text as typed, from its
    first word (or after a lone ``--``): apostrophes, backslashes and line breaks are
    kept, and an option name inside it is a word of the prompt.  From a shell
    (``args`` the argument list) the shell has split the words already."""
    prompt_at = -1
    after_dashes = False  # the prompt follows a lone --: option names in it are words
    if isinstance(args, str):
        words, prompt_at, after_dashes = _option_words(args)
    else:
        words = [*args[:1], *(_dashed(w) for w in args[1:])]
    if not words:
        raise RoutineError("usage: " + ADD_USAGE)
    d: dict[str, Any] = {"name": words[0], "tz": default_tz, "created_by": created_by}
    trigger = ""
    given: list[str] = []  # the options, as typed (a trigger's, an action's)
    prompt: list[str] = []
    i = 1
    while i < len(words):
        w = words[i]
        if w == "--":  # the flags end here: the rest is the prompt, even '--…'
            prompt = [*args[i + 1 :]]
            after_dashes = True
            break
        if any(c.isspace() for c in w):  # a quoted prompt from a shell ("--verbose …")
            prompt = [*args[i:]]
            break
        if w in _FLAGS or w in ("--manual", "--full", "--light"):
            given.append(w)
        if w in _FLAGS:
            if i + 1 >= len(words):
                raise RoutineError(f"{w} needs a value")
            d[_FLAGS[w]] = words[i + 1]
            if w == "--cron":
                trigger = "cron"
            elif w == "--event":
                trigger = "event"
            i += 2
            continue
        if w == "--manual":
            trigger = "manual"
        elif w == "--full":
            d["action"] = "full"
        elif w == "--light":
            d["action"] = "light"
        elif w.startswith("--"):  # a mistyped flag, not the prompt's start
            raise RoutineError(
                f"unknown option {w}; the options are {', '.join(KNOWN_FLAGS)} "
                "(a prompt that starts with -- goes after a lone --)"
            )
        else:  # the prompt has begun: every later word is a word of it
            prompt = [*args[i:]]
            break
        i += 1
    if isinstance(args, str):
        d["prompt"] = _unwrap(args[prompt_at:].strip()) if prompt_at >= 0 else ""
        prompt_words = [_dashed(w) for w in d["prompt"].split()]
    else:
        d["prompt"] = " ".join(prompt)
        prompt_words = [_dashed(w) for w in prompt]
    # the prompt's first word came right after --cron's value (i: where the loop stopped)
    cron_then_prompt = not after_dashes and i >= 2 and words[i - 2] == "--cron"
    _unquoted_cron(d.get("cron", ""), prompt_words, cron_then_prompt)
    late = next((w for w in prompt_words if w in KNOWN_FLAGS), None)
    if late is not None and not after_dashes:
        # Never taken as an option (a stray --full would make a tool-running job),
        # never swallowed either (--tz at the end would leave the routine in UTC).
        raise RoutineError(
            f"{late} comes after the prompt's first word: put options before the "
            "prompt, or a lone -- before a prompt that contains option names"
        )
    if not trigger:
        raise RoutineError("say when it runs: --cron 'EXPR', --event REGEX or --manual")
    _one_of_each(given, trigger)
    d["trigger"] = trigger
    try:
        for k, conv in (("cooldown_secs", float), ("dedup_secs", float), ("max_concurrent", int)):
            if k in d:
                d[k] = conv(d[k])
    except ValueError:
        raise RoutineError("--cooldown, --dedup and --max take numbers") from None
    return Routine(**d)


def _glob_escape(text: str) -> str:
    """``text`` matched literally in a SCAN MATCH pattern."""
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


# --- the store ------------------------------------------------------------------
@dataclass
class RunRecord:
    at: float
    trigger: str  # cron | event | manual
    outcome: str  # sent | ok (silent) | submitted | skipped:… | error:… | <turn outcome>
    duration: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "tr": self.trigger, "o": self.outcome, "d": self.duration}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        return cls(d["at"], d.get("tr", ""), d.get("o", ""), d.get("d", 0.0))


@dataclass
class RoutineState:
    last_fire: float = 0.0  # when the scheduler last fired it (catch-up base)
    last_run: float = 0.0
    outcome: str = ""
    duration: float = 0.0
    runs: int = 0


class RoutineStore:
    def __init__(self, redis: Redis, *, history: int = 20) -> None:
        self.redis = redis
        self.history = history
        self._queue_once = redis.register_script(scripts.QUEUE_RUN_ONCE)
        self._record = redis.register_script(scripts.ROUTINE_RECORD)
        self._send_failure = redis.register_script(scripts.ROUTINE_SEND_FAILURE)
        self._replace = redis.register_script(scripts.ROUTINE_REPLACE)

    async def add(self, r: Routine, *, replace: bool = False) -> bool:
        """Store a validated routine; False if the name is taken (and not ``replace``)."""
        if replace:
            await self.redis.hset(keys.ROUTINES, r.name, r.to_json())
            return True
        return bool(await self.redis.hsetnx(keys.ROUTINES, r.name, r.to_json()))

    async def save(self, r: Routine) -> None:
        await self.redis.hset(keys.ROUTINES, r.name, r.to_json())

    async def get(self, name: str) -> Routine | None:
        raw = await self.redis.hget(keys.ROUTINES, name.strip().lower())
        return Routine.from_json(raw) if raw else None

    async def all(self) -> list[Routine]:
        raw = cast(dict[bytes, bytes], await self.redis.hgetall(keys.ROUTINES))
        return sorted((Routine.from_json(v) for v in raw.values()), key=lambda r: r.name)

    async def retarget(self, old: ThreadKey, new: ThreadKey) -> list[str]:
        """Routines that notify ``old`` notify ``new`` from now on (the conversation
        moved there); the names of those changed.  Atomic against concurrent edits."""
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(keys.ROUTINES)
                    raw = cast(dict[bytes, bytes], await pipe.hgetall(keys.ROUTINES))
                    changed: dict[str, bytes] = {}
                    for name, data in raw.items():
                        r = Routine.from_json(data)
                        target = retarget(r.notify, old, new)
                        if target is not None:
                            r.notify = target
                            changed[name.decode()] = r.to_json()
                    if not changed:
                        await pipe.reset()  # type: ignore[no-untyped-call]
                        return []
                    pipe.multi()  # type: ignore[no-untyped-call]
                    for changed_name, changed_json in changed.items():
                        pipe.hset(keys.ROUTINES, changed_name, changed_json)
                    await pipe.execute()
                    return sorted(changed)
                except WatchError:
                    continue

    async def remove(self, name: str) -> bool:
        name = name.strip().lower()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.ROUTINES, name)
            pipe.delete(keys.routine_state(name), keys.routine_runs(name))
            pipe.delete(keys.routine_running(name), keys.routine_cooldown(name))
            res = await pipe.execute()
        if res[0]:
            await self._forget_dedup(name)
        return bool(res[0])

    async def _forget_dedup(self, name: str) -> None:
        """Delete the removed routine's dedup keys (one per message text it saw), so a
        routine added again under the same name is not muted by them."""
        match = keys.routine_dedup(_glob_escape(name), "*")
        batch: list[bytes | str] = []
        async for key in self.redis.scan_iter(match=match, count=500):
            batch.append(key)
            if len(batch) >= 500:
                await self.redis.delete(*batch)
                batch.clear()
        if batch:
            await self.redis.delete(*batch)

    async def set_enabled(
        self, name: str, enabled: bool, *, created_at: float | None = None
    ) -> Routine | None:
        """Pause or resume ``name``; None if there is none.  With ``created_at`` (a
        run pausing the routine it ran for): only if that routine is still the one
        stored under the name (not removed and added again meanwhile)."""
        if created_at is None:
            r = await self.get(name)
            if r is None:
                return None
            r.enabled = enabled
            await self.save(r)
        else:
            name = name.strip().lower()
            while True:
                raw = await self.redis.hget(keys.ROUTINES, name)
                if not raw:
                    return None
                r = Routine.from_json(raw)
                r.enabled = enabled
                args = [name, repr(created_at), raw, r.to_json()]
                done = await run_script(self.redis, self._replace, [keys.ROUTINES], args)
                if int(done) == 1:
                    break
                if int(done) < 0:
                    return None
        if enabled:  # the schedule resumes from now: a paused week is not a missed run
            await self.set_last_fire(name, time.time())
            await self.reset_send_failures(name)  # a fresh start after the target is fixed
        return r

    async def state(self, name: str) -> RoutineState:
        raw = cast(dict[bytes, bytes], await self.redis.hgetall(keys.routine_state(name)))
        d = {k.decode(): v.decode() for k, v in raw.items()}
        return RoutineState(
            float(d.get("last_fire", 0)),
            float(d.get("last_run", 0)),
            d.get("outcome", ""),
            float(d.get("duration", 0)),
            int(d.get("runs", 0)),
        )

    async def set_last_fire(self, name: str, at: float) -> None:
        await self.redis.hset(keys.routine_state(name), "last_fire", repr(at))

    async def count_send_failure(self, name: str, *, created_at: float | None = None) -> int:
        """One more permanent send failure in a row; the count so far.  With
        ``created_at``: only for that routine (-1, nothing counted: it was removed)."""
        if created_at is None:
            return int(await self.redis.hincrby(keys.routine_state(name), "send_failures", 1))
        return int(
            await run_script(
                self.redis,
                self._send_failure,
                [keys.ROUTINES, keys.routine_state(name)],
                [name, repr(created_at)],
            )
        )

    async def reset_send_failures(self, name: str) -> None:
        await self.redis.hdel(keys.routine_state(name), "send_failures")

    async def record(self, name: str, run: RunRecord, *, created_at: float | None = None) -> bool:
        """Record a run of ``name``.  With ``created_at`` (the definition the run ran
        for): only if that routine is still the one stored under the name; a run of a
        routine removed meanwhile (perhaps added again) records nothing.  Whether it
        was recorded."""
        if created_at is not None:
            args = [
                name,
                repr(created_at),
                repr(run.at),
                run.outcome,
                repr(round(run.duration, 3)),
                orjson.dumps(run.to_dict()),
                self.history,
            ]
            route = [keys.ROUTINES, keys.routine_state(name), keys.routine_runs(name)]
            return bool(await run_script(self.redis, self._record, route, args))
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                keys.routine_state(name),
                mapping={
                    "last_run": repr(run.at),
                    "outcome": run.outcome,
                    "duration": repr(round(run.duration, 3)),
                },
            )
            pipe.hincrby(keys.routine_state(name), "runs", 1)
            pipe.lpush(keys.routine_runs(name), orjson.dumps(run.to_dict()))
            pipe.ltrim(keys.routine_runs(name), 0, self.history - 1)
            await pipe.execute()
        return True

    async def runs(self, name: str, n: int = 5) -> list[RunRecord]:
        raw = await self.redis.lrange(keys.routine_runs(name), 0, n - 1)
        return [RunRecord.from_dict(orjson.loads(x)) for x in raw]

    async def queue_run(self, name: str, trigger: str = "manual", **extra: Any) -> None:
        """Ask the scheduler (wherever it runs) to run ``name`` once."""
        item = {"r": name, "tr": trigger, "at": time.time(), **extra}
        await self.redis.rpush(keys.ROUTINE_QUEUE, orjson.dumps(item))

    async def queue_run_once(
        self, once: str, ttl_secs: int, name: str, trigger: str, **extra: Any
    ) -> bool:
        """``queue_run``, unless ``once`` (a key) queued it within ``ttl_secs``;
        whether it was queued (one script: the key and the run, or neither)."""
        item = {"r": name, "tr": trigger, "at": time.time(), **extra}
        args = [ttl_secs, orjson.dumps(item)]
        return bool(
            await run_script(self.redis, self._queue_once, [once, keys.ROUTINE_QUEUE], args)
        )
