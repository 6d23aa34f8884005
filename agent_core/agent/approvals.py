"""Approvals as stored state: PendingApproval records, button tokens, one-winner claims.

A tool call that needs a person's yes is stored as a :class:`PendingApproval`
in a per-thread Redis hash (``{thread}:approval:<id>``) that outlives every
process.  The prompt's three buttons carry opaque tokens ``ap:<id>:a|w|d``
(at most 17 ASCII bytes, within every platform's limit).  A decision is
*claimed* by one Lua script on that hash: the first claim wins, every later
press (double click, replay, another instance) sees the decision already made.

Only the thread's own hash is ever consulted, so a token pressed in another
thread or platform, or a forged one, finds nothing and is refused.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, cast

import orjson
from redis.asyncio import Redis

from agent_core.events import Button, ButtonStyle, MessageRef, ThreadKey
from agent_core.llm.errors import redact
from agent_core.store import keys, scripts

TOKEN_PREFIX = "ap:"
_DECISION_CODES = {"a": "approve", "w": "always", "d": "deny"}
_CODE_OF = {v: k for k, v in _DECISION_CODES.items()}
_ID = re.compile(r"^[A-Za-z0-9_\-]{6,24}$")
# A key is secret-looking when one of its words (split at _ - . and spaces and at
# camelCase: "X-Api-Key", "accessToken", "session_id"), a trailing "s" dropped,
# holds a secret's root ("githubtoken", "PGPASSWORD", "api_keys", "passwords"), or
# is "auth…" other than "author…"; a count of tokens ("max_tokens") and a key that
# only contains "session" ("session_name") are shown.
_SECRET_ROOTS = (
    "authoriz",
    "token",
    "secret",
    "passw",
    "passphrase",
    "cookie",
    "credential",
    "apikey",
    "privatekey",
    "bearer",
    "sessionid",
)
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("session", "id")})
# words beside "tokens" that make it a count, not a secret (max_tokens, tokens_used)
_TOKEN_COUNTS = frozenset(
    {
        "max",
        "min",
        "num",
        "total",
        "input",
        "output",
        "prompt",
        "completion",
        "context",
        "reasoning",
        "cached",
        "used",
        "n",
        "count",
        "limit",
        "budget",
    }
)
# words that make a "token" a credential whatever stands beside it
_CREDENTIAL_WORDS = frozenset(
    {
        "access",
        "refresh",
        "id",
        "api",
        "bearer",
        "auth",
        "oauth",
        "csrf",
        "xsrf",
        "session",
        "personal",
        "jwt",
        "bot",
        "user",
        "client",
        "app",
        "secret",
        "private",
        "github",
        "gitlab",
        "slack",
        "discord",
        "telegram",
    }
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")
MAX_VALUE_CHARS = 200
KEEP_AFTER_EXPIRY_SECS = 86_400  # a late press still hears "expired", not "unknown"


class ClaimOutcome(StrEnum):
    WON = "won"  # this event decides (or already decided, on a rerun of it)
    ALREADY = "already"  # someone else decided first
    EXPIRED = "expired"
    UNKNOWN = "unknown"


@dataclass
class PendingApproval:
    id: str
    thread: str
    tool: str
    call_id: str
    arguments: dict[str, Any]
    requester: str  # channel-qualified user id
    requester_name: str = ""
    created_at: float = 0.0
    expires_at: float = 0.0
    prompt_ref: MessageRef | None = None
    # the reply part its prompt was sent as ("<event id>:<n>"): a rerun of the turn
    # that asks again sends its own prompt as the same part (the same message)
    prompt_part: str = ""
    # decision fields (set by the claim)
    decision: str = ""
    decided_by: str = ""
    decided_by_name: str = ""
    decided_at: float = 0.0
    result: str | None = None  # the tool's output once run (a rerun reuses it)
    started: bool = False  # the approved call was started (a rerun never starts it again)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "id": self.id,
                "t": self.thread,
                "tool": self.tool,
                "cid": self.call_id,
                "args": self.arguments,
                "rq": self.requester,
                "rqn": self.requester_name,
                "ca": self.created_at,
                "ea": self.expires_at,
            }
        )

    @classmethod
    def from_hash(cls, h: dict[bytes, bytes]) -> PendingApproval:
        d = orjson.loads(h[b"d"])
        ref = h.get(b"ref")
        res = h.get(b"res")
        return cls(
            id=d["id"],
            thread=d["t"],
            tool=d["tool"],
            call_id=d["cid"],
            arguments=d.get("args") or {},
            requester=d["rq"],
            requester_name=d.get("rqn", ""),
            created_at=d.get("ca", 0.0),
            expires_at=d.get("ea", 0.0),
            prompt_ref=MessageRef.from_dict(orjson.loads(ref)) if ref else None,
            prompt_part=h.get(b"part", b"").decode(),
            decision=h.get(b"dec", b"").decode(),
            decided_by=h.get(b"by", b"").decode(),
            decided_by_name=h.get(b"byn", b"").decode(),
            decided_at=int(h.get(b"at", b"0")) / 1000,
            result=res.decode() if res is not None else None,
            started=b"run" in h,
        )


def token(approval_id: str, decision: str) -> str:
    return f"{TOKEN_PREFIX}{approval_id}:{_CODE_OF[decision]}"


def parse_token(tok: str) -> tuple[str, str] | None:
    """``ap:<id>:a`` -> (id, 'approve'); None for anything else."""
    if not tok.startswith(TOKEN_PREFIX):
        return None
    body = tok[len(TOKEN_PREFIX) :]
    aid, _, code = body.rpartition(":")
    if not _ID.match(aid) or code not in _DECISION_CODES:
        return None
    return aid, _DECISION_CODES[code]


def buttons(approval_id: str, *, always: bool = True) -> tuple[Button, ...]:
    """Approve / Always / Deny (no Always for a tool that asks every time)."""
    return (
        Button("Approve", token(approval_id, "approve"), ButtonStyle.PRIMARY),
        *(
            [Button("Always", token(approval_id, "always"), ButtonStyle.SECONDARY)]
            if always
            else []
        ),
        Button("Deny", token(approval_id, "deny"), ButtonStyle.DANGER),
    )


# --- readable summaries -----------------------------------------------------
# Arguments shown in a code block of their own, with their length, rather than cut
# to MAX_VALUE_CHARS on one line: (limit, redacted).  run_shell's command is code
# that runs as given: shown whole and exactly (limit None, never redacted: a hidden
# run of text could hide a quote), at most 4,000 characters (ShellArgs).  A prompt
# longer than a platform's message is split into several messages by the channel,
# a code block kept whole where it fits in one.
OWN_BLOCK: dict[str, dict[str, tuple[int | None, bool]]] = {
    "run_shell": {"command": (None, False)},
    "http_request": {"url": (None, True), "body": (3000, True)},
}
_BACKTICKS = re.compile(r"`+")
# Characters that would make the shown text differ from what runs: control
# characters, C1 included (a carriage return or U+0085 reads as a new line), line
# and paragraph separators, and the Unicode marks that reorder or hide text
# ("Trojan Source" bidi overrides, zero-width and other default-ignorable
# characters: soft hyphen, fillers, variation selectors and tag characters, which
# can carry hidden text).
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5"
    "\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f"
    "\ufeff\uffa0\ufff9-\ufffb\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\U000110bd"
    "\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff\ud800-\udfff]"
)


def _visible(ch: str) -> str:
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ … ␟ (the Unicode control pictures)
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"⟨U+{code:04X}⟩"


def code_block(text: str) -> str:
    """``text`` as a fenced code block every renderer shows verbatim: the fence is a
    longer run of backticks than any inside it (so no line of it can close the block),
    and characters that would display as something else are shown by name."""
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{_INVISIBLE.sub(lambda m: _visible(m.group()), text)}\n{fence}"


def _one_line(text: str) -> str:
    """A value shown on one line: a string with line breaks (or other control or
    invisible characters) is shown JSON-quoted, so it cannot start lines of its own."""
    if _INVISIBLE.search(text) or "\n" in text or "\t" in text:
        text = orjson.dumps(text).decode()
        return _INVISIBLE.sub(lambda m: _visible(m.group()), text)
    return text


def _token_count(stems: list[str], i: int) -> bool:
    """Is the "token" at ``stems[i]`` a number of tokens: a count word right before it
    (two words back past "new": max_new_tokens) or right after it (tokens_used), and
    no credential word anywhere in the key (new_access_token, per_user_token)?"""
    if any(x in _CREDENTIAL_WORDS for x in stems):
        return False
    before = stems[max(0, i - 2) : i] if i >= 2 and stems[i - 1] == "new" else stems[i - 1 : i]
    after = stems[i + 1 : i + 2]
    return any(x in _TOKEN_COUNTS for x in before + after)


def secret_key(key: str) -> bool:
    """Whether an argument named ``key`` holds a secret (whatever it holds is masked,
    its strings and numbers at any depth): one of its words holds a secret's root
    (``Authorization``, ``X-Api-Key``, ``access_token``, ``githubtoken``,
    ``PGPASSWORD``, ``api_keys``), or it is ``session`` itself (a cookie's)."""
    words = [w.lower() for w in _WORD_SPLIT.split(_CAMEL.sub("_", key)) if w]
    if words == ["session"]:
        return True
    stems = [w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words]
    for i, w in enumerate(stems):
        if w.startswith("tokeniz") or (w == "token" and _token_count(stems, i)):
            continue  # max_new_tokens, tokens_used, n_tokens: a number; a tokenizer
        if any(root in w for root in _SECRET_ROOTS):
            return True
        if w.startswith("auth") and not w.startswith("author"):
            return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(stems))


class _Members(list[tuple[str, Any]]):
    """A JSON object's members as written: in order, a key given twice kept twice
    (a server may act on either value; the prompt shows both)."""


class _Number(str):
    """A JSON number (or NaN / Infinity) exactly as written."""


_NOT_JSON = object()


def _json(text: str) -> Any:
    """``text`` parsed as a JSON object or array (_NOT_JSON if it is not one)."""
    if text.lstrip()[:1] not in ("{", "["):
        return _NOT_JSON
    try:
        return json.loads(
            text,
            object_pairs_hook=_Members,
            parse_int=_Number,
            parse_float=_Number,
            parse_constant=_Number,
        )
    except (ValueError, RecursionError):
        return _NOT_JSON


def _quoted(text: str) -> str:
    """A string inside an object or a list, JSON-quoted (so ``"me, amount: 5"`` cannot
    pass for two members) with the characters that display as something else named."""
    return _INVISIBLE.sub(lambda m: _visible(m.group()), json.dumps(text, ensure_ascii=False))


def _show(value: Any, key: str = "", *, top: bool = False, inside_secret: bool = False) -> str:
    """``value`` as shown in a prompt: JSON-style (strings quoted, a JSON body's members
    as written, duplicates included), anything that looks like a key redacted.  Under
    a secret-named key (``inside_secret`` below one) every string and number is
    masked, at any depth and whether or not it looks like JSON; objects and lists
    there show their shape and keys, so the prompt still shows what a call sends.
    ``top``: an argument itself, a plain string of which is shown as it is on its
    line (quoted if it has line breaks: ``_one_line``)."""
    secret = inside_secret or (bool(key) and secret_key(key))
    if isinstance(value, str) and not isinstance(value, _Number):
        if secret:
            return "•••"
        parsed = _json(value)  # a JSON body (an HTTP request's, say)
        if parsed is not _NOT_JSON:
            value = parsed
    # "session" alone names a cookie's value or an object the call acts on: its
    # string is masked, an object under it shown (its own secrets masked by name)
    below = secret and (inside_secret or key.lower() != "session")
    if isinstance(value, _Members):
        inner = ", ".join(
            f"{_quoted(str(k))}: {_show(v, str(k), inside_secret=below)}" for k, v in value
        )
        return "{" + inner + "}"
    if isinstance(value, dict):
        inner = ", ".join(
            f"{_quoted(str(k))}: {_show(v, str(k), inside_secret=below)}" for k, v in value.items()
        )
        return "{" + inner + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_show(v, key, inside_secret=below) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if secret:
        return "•••"
    if isinstance(value, _Number):
        return redact(value)
    if isinstance(value, str):
        return _one_line(redact(value)) if top else _quoted(redact(value))
    try:
        return redact(json.dumps(value))
    except (TypeError, ValueError):
        return _quoted(redact(str(value)))


def _cut(text: str) -> str:
    if len(text) <= MAX_VALUE_CHARS:
        return text
    return (
        text[:MAX_VALUE_CHARS]
        + f" … [cut: {len(text) - MAX_VALUE_CHARS} more characters not shown]"
    )


def _block_text(value: Any, key: str, redacted: bool) -> str:
    if not redacted:
        return value if isinstance(value, str) else orjson.dumps(value).decode()
    if isinstance(value, str) and _json(value) is _NOT_JSON:
        return redact(value)  # line breaks kept: the block shows them as they are
    return _show(value, key)


def describe_call(tool: str, arguments: dict[str, Any]) -> str:
    """The call as a person approves it.  Every value sits in a fenced code block
    (nothing in it can format the prompt or forge lines of it).  The arguments of
    :data:`OWN_BLOCK` each get a block of their own with their length (run_shell's
    command whole and exactly); the others one line each, secrets redacted, cut past
    MAX_VALUE_CHARS with a visible note of how much was not shown."""
    lines = [f"**{tool}**"]
    own = OWN_BLOCK.get(tool, {})
    rest = [(k, v) for k, v in arguments.items() if str(k) not in own]
    if rest:
        shown = "\n".join(
            f"{_one_line(str(k))}: {_cut(_show(v, str(k), top=True))}" for k, v in rest
        )
        lines.append(code_block(shown))
    for k, v in arguments.items():
        if str(k) not in own:
            continue
        limit, redacted = own[str(k)]
        text = _block_text(v, str(k), redacted)
        # the length and lines are the value's as sent, not of the text shown (a JSON
        # body is shown re-rendered, with its secrets masked)
        real = v if isinstance(v, str) else text
        if limit is not None and len(text) > limit:
            what = f"only the first {limit:,} of {len(real):,} characters shown"
            if len(text) != len(real):
                what = f"{len(real):,} characters; shown re-rendered, only the first {limit:,}"
            text = text[:limit]
        else:
            n = real.count("\n") + 1
            exactly = "" if redacted else "exactly as it will run, "
            what = f"{exactly}{len(real):,} characters, {n} line{'s' if n != 1 else ''}"
        lines.append(f"{k} ({what}):")
        lines.append(code_block(text))
    return "\n".join(lines)


def typed_hint(words: tuple[str, ...], *, reply_only: bool, command: str | None = None) -> str:
    """How to answer in words: typing them, or (``reply_only``: a group where only
    messages addressed to the bot reach it) replying to the prompt with them.
    ``command`` (the channel's ``typed_command``, agent_core.outbox): the words reach
    Parley here only as that command's text; '': not at all (no hint)."""
    if command == "":
        return ""
    if command:
        return "Sending " + " / ".join(f"`{command} {w}`" for w in words) + " works too."
    listed = " / ".join(f"*{w}*" for w in words)
    if reply_only:
        return f"In this group, reply to this message with {listed} (or send /approve or /deny)."
    return f"Typing {listed} works too."


def prompt_text(
    a: PendingApproval,
    ttl_secs: int,
    *,
    always: bool = True,
    group: bool = False,
    reply_only: bool = False,
    command: str | None = None,
) -> str:
    """The prompt's text.  ``always``: the tool may be approved for good (else it asks
    every time); ``group``: others write here too, so "Always" names whose requests it
    covers (only the requester's); ``reply_only``: a plain "yes" does not reach Parley
    here, a reply to the prompt does (agent_core.outbox, group text); ``command``:
    how typed words reach this conversation, if the channel says (see typed_hint)."""
    mins = max(1, round(ttl_secs / 60))
    if always:
        whose = f", for {a.requester_name or 'the same person'}" if group else ""
        choices = (
            f"Approve once, Always (this tool{whose}, for the rest of this conversation), or Deny."
        )
        hint = typed_hint(("yes", "always", "no"), reply_only=reply_only, command=command)
    else:
        choices = "Approve or Deny (this tool asks every time)."
        hint = typed_hint(("yes", "no"), reply_only=reply_only, command=command)
    if hint:
        choices = f"{choices} {hint}"
    return (
        "🔐 **Approval needed** — I want to run:\n\n"
        f"{describe_call(a.tool, a.arguments)}\n\n"
        f"{choices} Expires in {mins} min. (id `{a.id}`)"
    )


DECIDED = {
    "approve": "approved",
    "always": "approved (always)",
    "deny": "denied",
    "expired": "it expired",
    "cancel": "cancelled",
}


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M UTC")


def resolved_text(a: PendingApproval, decision: str, by_name: str, at: float) -> str:
    verdict = {
        "approve": "✅ Approved",
        "always": "✅ Approved (always, for this conversation)",
        "deny": "❌ Denied",
        "expired": "⌛ Expired — not run",
        "cancel": "🚫 Cancelled — not run",
    }.get(decision, decision)
    who = f" by {by_name}" if by_name and decision not in ("expired",) else ""
    return f"{describe_call(a.tool, a.arguments)}\n\n{verdict}{who} at {_when(at)}."


# --- the store --------------------------------------------------------------
@dataclass
class ClaimResult:
    outcome: ClaimOutcome
    decision: str = ""
    mine: bool = False  # this event's claim decided it (now, or on a rerun of it)


WRITTEN_OVER = "-"  # approval-prompts: the part shows no earlier approval's prompt now


@dataclass
class ApprovalStore:
    redis: Redis
    ttl_secs: int = 1800
    clock: Callable[[], float] = time.time
    # the scheduler closes a prompt when its time runs out (keys.APPROVALS_DUE);
    # False (SCHEDULER_ENABLED=false): it closes when someone next writes or presses
    timed: bool = False
    _claim: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._claim = self.redis.register_script(scripts.APPROVAL_CLAIM)
        self._hset_if_exists = self.redis.register_script(scripts.HSET_IF_EXISTS)
        self._prompts = self.redis.register_script(scripts.APPROVAL_PROMPTS)

    @staticmethod
    def new_id() -> str:
        return secrets.token_urlsafe(9)  # 12 chars, 72 random bits

    def new(
        self,
        thread: ThreadKey,
        tool: str,
        call_id: str,
        arguments: dict[str, Any],
        requester: str,
        requester_name: str,
    ) -> PendingApproval:
        now = self.clock()
        return PendingApproval(
            id=self.new_id(),
            thread=str(thread),
            tool=tool,
            call_id=call_id,
            arguments=arguments,
            requester=requester,
            requester_name=requester_name,
            created_at=now,
            expires_at=now + self.ttl_secs,
        )

    async def create(self, thread: ThreadKey, a: PendingApproval) -> None:
        key = keys.approval(thread, a.id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping={"d": a.to_json(), "exp": int(a.expires_at * 1000)})
            pipe.expire(key, self.ttl_secs + KEEP_AFTER_EXPIRY_SECS)
            if self.timed:
                pipe.zadd(keys.APPROVALS_DUE, {due_member(thread, a.id): a.expires_at})
            await pipe.execute()

    async def set_prompt_ref(
        self, thread: ThreadKey, approval_id: str, ref: MessageRef, part: str = ""
    ) -> None:
        """Where approval ``approval_id``'s prompt is; ``part``: the reply part it was
        sent as, which from now on shows this approval (see :meth:`prompt_owner`)."""
        raw_ref = orjson.dumps(ref.to_dict())
        if not part:
            await self._hset_if_exists(
                keys=[keys.approval(thread, approval_id)], args=["ref", raw_ref]
            )
            return
        await self._write_prompts(
            [keys.approval_prompts(thread), keys.approval(thread, approval_id)],
            raw_ref,
            {part: approval_id},
        )

    async def forget_prompts(self, thread: ThreadKey, parts: Sequence[str]) -> None:
        """A rerun of a turn rewrites ``parts`` (an earlier execution's): the prompts
        they showed are gone, whatever the rerun writes there (text, another prompt)."""
        if parts:
            await self._write_prompts(
                [keys.approval_prompts(thread)], b"", dict.fromkeys(parts, WRITTEN_OVER)
            )

    async def _write_prompts(
        self, script_keys: list[str], raw_ref: bytes, owners: dict[str, str]
    ) -> None:
        """One round trip: the owners of ``owners``' parts, entries older than any
        approval they could name dropped (see scripts.APPROVAL_PROMPTS)."""
        keep = self.ttl_secs + KEEP_AFTER_EXPIRY_SECS
        args: list[Any] = [int(self.clock() * 1000), keep * 1000, keep, raw_ref]
        for part, owner in owners.items():
            args += [part, owner]
        await self._prompts(keys=script_keys, args=args)

    async def prompt_owner(self, thread: ThreadKey, part: str) -> str:
        """The approval whose prompt reply part ``part`` shows now (WRITTEN_OVER: none,
        a rerun wrote over it; '' unknown, e.g. a conversation that moved): a
        rerun that asked again took over its earlier execution's prompt message, and
        the earlier approval (never to be decided) must not edit it when it expires."""
        raw = await self.redis.hget(keys.approval_prompts(thread), part)
        owner = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        return owner.partition("|")[0]  # '<owner>|<ms written>'

    async def load(self, thread: ThreadKey, approval_id: str) -> PendingApproval | None:
        raw = cast(dict[bytes, bytes], await self.redis.hgetall(keys.approval(thread, approval_id)))
        if not raw or b"d" not in raw:
            return None
        return PendingApproval.from_hash(raw)

    async def claim(
        self,
        thread: ThreadKey,
        approval_id: str,
        decision: str,
        by: str,
        by_name: str,
        event_id: str,
        made_at: float = 0.0,
    ) -> ClaimResult:
        """Decide approval ``approval_id`` (first claim wins).  ``made_at``: when the
        decision was made (a press's or a typed answer's ingest time, ``received_at``);
        it is judged against the expiry by the earlier of that and now, so a press
        made in time but taken up late (workers down for a deploy, a backlog) still
        counts.  0: now (the timer, a cancel)."""
        now = self.clock()
        judged = min(now, made_at) if made_at > 0 else now
        res = await self._claim(
            keys=[keys.approval(thread, approval_id)],
            args=[decision, by, by_name, event_id, int(now * 1000), int(judged * 1000)],
        )
        code, dec = int(res[0]), res[1]
        dec = dec.decode() if isinstance(dec, bytes) else str(dec)
        if self.timed:  # decided (or gone): nothing left for the timer to close
            await self.redis.zrem(keys.APPROVALS_DUE, due_member(thread, approval_id))
        if code == 0:
            return ClaimResult(ClaimOutcome.UNKNOWN)
        if code == 3 or dec == "expired":  # now, on a rerun, or before (another event)
            return ClaimResult(ClaimOutcome.EXPIRED, "expired", mine=code != 2)
        if code == 2:
            return ClaimResult(ClaimOutcome.ALREADY, dec)
        return ClaimResult(ClaimOutcome.WON, dec, mine=True)

    async def mark_started(self, thread: ThreadKey, approval_id: str, call_id: str = "") -> None:
        """Recorded before the approved call starts: a rerun of the deciding turn
        (a crash, a shutdown past its grace) finds it and does not run it again.
        ``call_id``: another call this decision let run (one "Always" covers)."""
        await self._hset_if_exists(
            keys=[keys.approval(thread, approval_id)], args=[_field("run", call_id), "1"]
        )

    async def store_result(
        self, thread: ThreadKey, approval_id: str, result: str, call_id: str = ""
    ) -> None:
        # never into a record gone with its TTL (it would come back without one)
        await self._hset_if_exists(
            keys=[keys.approval(thread, approval_id)], args=[_field("res", call_id), result]
        )

    async def call_record(
        self, thread: ThreadKey, approval_id: str, call_id: str
    ) -> tuple[bool, str | None]:
        """Whether the decision's run of ``call_id`` was started, and its result."""
        run, res = await self.redis.hmget(
            keys.approval(thread, approval_id), _field("run", call_id), _field("res", call_id)
        )
        return run is not None, (res.decode() if isinstance(res, bytes) else res)

    async def arrivals(self, thread: ThreadKey) -> int:
        """How many messages ``thread`` has taken in so far (its arrival counter):
        those numbered up to here were sent before whatever is asked now."""
        raw = await self.redis.get(keys.seq(thread))
        return int(raw or 0)


def due_member(thread: ThreadKey, approval_id: str) -> bytes:
    """The approval's entry in keys.APPROVALS_DUE."""
    return orjson.dumps([str(thread), approval_id])


def _field(name: str, call_id: str) -> str:
    return f"{name}:{call_id}" if call_id else name
