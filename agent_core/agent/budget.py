"""Cost guard: daily budgets and the hourly action window, shared by every process.

Checked before every LLM call and recorded after it with the real usage, in
integer micro-dollars, by two Lua scripts on keys sharing the ``{budget}``
hash tag.  A check *reserves* the call's cost at most (:func:`reserved_cost`:
the prompt estimate and a whole answer of the request's max_tokens, else the
backend's LLM_MAX_TOKENS), so N processes racing near the limit cannot all pass
on the same spare cent: what is spent plus what is reserved must stay under the
limit for a call to start, so the total overshoots by at most one call's
reservation, as long as no call costs more than it reserved (a prompt above its
estimate; an OpenAI-compatible server, which is sent no limit when the request
sets none, answering longer than LLM_MAX_TOKENS; a call still running when its
reservation lapses after 10 minutes).  When what is left of a budget is not
spent but reserved by calls in flight, a call waits for them to settle (up to
RESERVE_WAIT_SECS) instead of being told the budget is used up; a turn's call
stops waiting at once on /interrupt (or a lost lock), like a call cut off while it
streams, and makes no call, is billed nothing and leaves no reservation behind (a
check cut off while its script was in flight gives back what it reserved as soon
as the reply is in; the turn's timeout cancels the wait the same way).

Recording is exactly once per reservation: the script claims a marker with SET NX
as it adds the cost.  A record that fails (a Redis error, a reply lost or cut off:
Redis may or may not have run it) is kept and sent again with the next
:meth:`BudgetGuard.flush` (every 5 s, like the spend counted for later), which
adds the cost if it was not added and drops the reservation either way; before,
the reservation stayed for its 10 minutes, and near a limit every later call of
that person (or everyone's, for the day's budget) waited 20 s to be refused.
Counters are per UTC day (keys expire after two days); the hourly window is a
per-user sorted set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.llm.base import Completion, ModelInfo, TokenUsage
from agent_core.settings import CoreSettings
from agent_core.store import keys, scripts

log = logging.getLogger(__name__)

MICRO = 1_000_000
DAY_TTL = 2 * 86_400
WARN_AT = 0.8
# how long a call waits for calls in flight to settle when their reservations hold
# what is left of a budget (the budget.py header)
RESERVE_WAIT_SECS = 20.0
# how long a record's "booked" marker lives: a kept record is sent again with the
# next flush (every 5 s), so an hour covers any retry without a key per call per day
RECORDED_TTL = 3600

Attempt = tuple[int, str]  # a check's code and its reservation id
# runs the wait for room (a turn's ``interruptible``: /interrupt cuts it short)
Waiter = Callable[[Coroutine[Any, Any, Attempt]], Awaitable[Attempt]]


class BudgetRefused(Exception):
    """Over a limit: ``str(exc)`` is the plain message for the user."""


def micro(usd: float) -> int:
    return max(0, round(usd * MICRO))


@dataclass
class Spend:
    day_usd: float
    user_usd: float


class BudgetGuard:
    def __init__(
        self, redis: Redis, settings: CoreSettings, clock: Callable[[], float] = time.time
    ) -> None:
        self.redis = redis
        self.s = settings
        self.clock = clock
        self._unbooked: dict[str, int] = {}  # key -> micro-dollars (book_later)
        self._batches: list[tuple[str, dict[str, int]]] = []  # sent, outcome unknown
        self._unrecorded: list[tuple[list[str], list[Any]]] = []  # records to send again
        self._releases: set[asyncio.Task[None]] = set()  # checks cut off, given back
        self._reserve = redis.register_script(scripts.BUDGET_RESERVE)
        self._record = redis.register_script(scripts.BUDGET_RECORD)
        self._book = redis.register_script(scripts.BUDGET_FLUSH)

    @property
    def enabled(self) -> bool:
        s = self.s
        return bool(s.daily_budget_usd or s.user_daily_budget_usd or s.hourly_action_limit)

    def day(self) -> str:
        return datetime.fromtimestamp(self.clock(), UTC).strftime("%Y%m%d")

    async def reserve(self, user: str, estimate_usd: float, wait: Waiter | None = None) -> str:
        """Reserve one call; returns its reservation id ('' when no limit is set).

        While what is left of a budget is only reserved by calls in flight (each
        reserves a whole answer, and settles at its real cost within seconds), it
        asks again for up to RESERVE_WAIT_SECS before refusing: a burst of people
        writing at once is answered, not told the budget is used up.  That wait
        runs under ``wait`` when given (a turn's ``interruptible``, so /interrupt
        ends it at once with whatever that raises); a first check that finds room
        runs as before, with no task or watch of its own."""
        if not self.enabled:
            return ""
        deadline = time.monotonic() + RESERVE_WAIT_SECS
        code, rid = await self._try_reserve(user, estimate_usd)
        if code in (2, -3):
            room = self._wait_for_room(user, estimate_usd, deadline, (code, rid))
            code, rid = await (room if wait is None else wait(room))
        if code == 1:
            return rid
        if code == 2:
            raise BudgetRefused(
                "Today's AI budget for this bot is nearly reached and other requests are "
                "still running. Please try again in a minute."
            )
        if code == -3:
            raise BudgetRefused(
                "Your daily AI budget is nearly reached while your other requests run. "
                "Please try again in a minute."
            )
        return self._refused(code)

    async def _wait_for_room(
        self, user: str, estimate_usd: float, deadline: float, first: Attempt
    ) -> Attempt:
        code, rid = first
        delay = 0.2
        while code in (2, -3) and time.monotonic() + delay <= deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
            code, rid = await self._try_reserve(user, estimate_usd)
        return code, rid

    async def _try_reserve(self, user: str, estimate_usd: float) -> Attempt:
        day = self.day()
        rid = secrets.token_hex(8)  # also names the record's marker (RECORDED_TTL)
        call = asyncio.ensure_future(
            self._reserve(
                keys=[
                    keys.budget_day(day),
                    keys.budget_user(day, user),
                    keys.budget_reserved(day),
                    keys.budget_actions(user),
                ],
                args=[
                    int(self.clock() * 1000),
                    micro(self.s.daily_budget_usd),
                    micro(self.s.user_daily_budget_usd),
                    micro(estimate_usd),
                    rid,
                    self.s.hourly_action_limit,
                    DAY_TTL,
                    user,
                ],
            )
        )
        try:
            res = await asyncio.shield(call)
        except BaseException:
            # cut off (/interrupt, the turn's timeout) or failed with the script
            # perhaps run: what it reserved goes back once its outcome is known
            call.add_done_callback(lambda done: self._give_back(done, day, user, rid))
            raise
        return int(res[0]), rid

    def _give_back(self, call: asyncio.Future[Any], day: str, user: str, rid: str) -> None:
        """A check whose caller stopped waiting for it: if it reserved (or may have:
        an error), the reservation and its hourly action are dropped, at no cost."""
        if call.cancelled():
            return  # never sent
        if call.exception() is None and int(call.result()[0]) != 1:
            return  # it reserved nothing
        keys_, args = self._record_args(day, user, rid, 0)
        keys_.append(keys.budget_actions(user))
        task = asyncio.get_running_loop().create_task(self._send_record(keys_, args))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _send_record(self, keys_: list[str], args: list[Any]) -> None:
        """One record now, kept for :meth:`flush` if it fails (or is cut off)."""
        try:
            await self._record(keys=keys_, args=args, client=self.redis)
        except BaseException as exc:
            self._unrecorded.append((keys_, args))
            if not isinstance(exc, Exception):
                raise
            log.debug("budget: a reservation not given back yet: %s", type(exc).__name__)

    @staticmethod
    def _record_args(day: str, user: str, rid: str, cost: int) -> tuple[list[str], list[Any]]:
        return (
            [
                keys.budget_day(day),
                keys.budget_user(day, user),
                keys.budget_reserved(day),
                keys.budget_recorded(rid),
            ],
            [rid, cost, DAY_TTL, RECORDED_TTL],
        )

    def _refused(self, code: int) -> NoReturn:
        if code == 0:
            log.warning(
                "daily budget of $%.2f reached; refusing LLM calls", self.s.daily_budget_usd
            )
            raise BudgetRefused(
                "The daily AI budget for this bot is used up. It resets at midnight UTC."
            )
        if code == -1:
            raise BudgetRefused(
                f"You've used your daily AI budget (${self.s.user_daily_budget_usd:.2f}). "
                "It resets at midnight UTC."
            )
        raise BudgetRefused(
            f"You've reached the limit of {self.s.hourly_action_limit} AI calls per hour. "
            "Please try again a bit later."
        )

    async def record(self, user: str, reservation: str, cost_usd: float) -> list[str]:
        """Book the real cost; returns the scopes that just crossed 80 % (once per day).

        If it fails (or is cut off) the record is kept, and the next :meth:`flush`
        sends it again (adding the cost only if this one did not); the error is
        raised all the same."""
        day = self.day()
        cost = micro(cost_usd)
        keys_, args = self._record_args(day, user, reservation or secrets.token_hex(8), cost)
        try:
            res: Any = await self._record(keys=keys_, args=args)
        except BaseException:
            self._unrecorded.append((keys_, args))
            raise
        day_total, user_total = int(res[0]), int(res[1])
        crossed: list[str] = []
        if not int(res[2]):
            return crossed  # booked before (cannot happen on a first try)
        for scope, limit, total in (
            ("all", micro(self.s.daily_budget_usd), day_total),
            (user, micro(self.s.user_daily_budget_usd), user_total),
        ):
            if limit and total - cost < WARN_AT * limit <= total:
                first = await self.redis.set(
                    keys.budget_warned(day, scope), b"1", nx=True, ex=DAY_TTL
                )
                if first:
                    log.warning(
                        "budget %s at %.0f%% of $%.2f today",
                        scope,
                        100 * total / limit,
                        limit / MICRO,
                    )
                    crossed.append(scope)
        return crossed

    def book_later(self, user: str, cost_usd: float) -> None:
        """With no limit set, a call's cost is still counted (/cost shows it, and a
        budget set mid-day counts what was spent that day), but with this process's
        next :meth:`flush` (the runtime's metrics flush, every 5 s and at shutdown,
        and before :meth:`spend` reads), not in a round trip of its own on every turn."""
        day, cost = self.day(), micro(cost_usd)
        for key in (keys.budget_day(day), keys.budget_user(day, user)):
            self._unbooked[key] = self._unbooked.get(key, 0) + cost

    async def flush(self) -> None:
        """Add what :meth:`book_later` counted to the day's counters, one script call
        per batch; a batch whose outcome is unknown is kept for the next flush.

        Each batch carries a token the script claims with SET NX as it adds the
        amounts, so a retry is idempotent.  Putting the amounts back without one is
        wrong when the call is cut off after it was sent (a cancellation, a reply
        that comes late or is lost): Redis may have added them, and the next flush
        would count them twice; dropping them instead would lose spend that was never
        added.  With the token the retry adds them exactly once either way.

        Records of real costs that failed (:meth:`record`) are sent again first, and
        checks cut off after they reserved give their reservation back: the same
        script, idempotent per reservation, so each is added once and its reservation
        dropped however many times it is sent."""
        records, self._unrecorded = self._unrecorded, []
        while records:
            keys_, args = records[0]
            try:
                await self._record(keys=keys_, args=args, client=self.redis)
            except BaseException:
                self._unrecorded = records + self._unrecorded
                raise
            records.pop(0)
        batches, self._batches = self._batches, []
        if self._unbooked:
            batches.append((secrets.token_hex(8), self._unbooked))
            self._unbooked = {}
        while batches:
            token, amounts = batches[0]
            try:
                await self._book(
                    keys=[keys.budget_flushed(token), *amounts],
                    args=[DAY_TTL, *amounts.values()],
                    client=self.redis,
                )
            except BaseException:
                self._batches = batches + self._batches  # retried, same token
                raise
            batches.pop(0)

    async def spend(self, user: str) -> Spend:
        with contextlib.suppress(RedisError, OSError):  # what this process booked later
            await self.flush()
        day = self.day()
        d, u = await self.redis.mget(keys.budget_day(day), keys.budget_user(day, user))
        return Spend(int(d or 0) / MICRO, int(u or 0) / MICRO)


CHARS_PER_TOKEN = 4


DEFAULT_ANSWER_TOKENS = 4096  # LLM_MAX_TOKENS' default: a provider that says none


def reserved_cost(info: ModelInfo, prompt_tokens: int, max_tokens: int | None) -> float:
    """What a check reserves for a call: its prompt and the longest answer it may
    get (the request's ``max_tokens``, else the backend's LLM_MAX_TOKENS), so a
    call's real cost is not above its reservation unless the prompt estimate is
    low (or a server that is sent no limit answers longer)."""
    answer = max_tokens or info.max_output_tokens or DEFAULT_ANSWER_TOKENS
    return prompt_tokens * info.input_cost_per_token + answer * info.output_cost_per_token


def estimated_cost(info: ModelInfo, prompt_tokens: int, answer_chars: int) -> float:
    """A call's cost when the provider did not report it: the prompt, and
    4 characters a token of the answer."""
    return (
        prompt_tokens * info.input_cost_per_token
        + (answer_chars / CHARS_PER_TOKEN) * info.output_cost_per_token
    )


def unreported(final: Completion) -> bool:
    """No usage on a completed call (a server that sends none); a response-cache
    hit reports none because it cost nothing."""
    return final.usage == TokenUsage() and not final.provider.startswith("cache(")


def answer_chars(final: Completion, streamed: int) -> int:
    """The answer's length for an estimate: its text (or what streamed, if more) and
    its tool calls' names and arguments."""
    calls = sum(len(c.name) + len(orjson.dumps(c.arguments)) for c in final.tool_calls)
    return max(streamed, len(final.text)) + calls


@dataclass
class Bill:
    """What a metered call really cost: set once the answer is in.  An estimate
    (:func:`estimated_cost`) for a call whose provider reported no usage, and for a
    call cut off (/interrupt, a timeout) or failed after text streamed; 0 if it
    failed before any text (a refused request is not billed)."""

    cost_usd: float = 0.0


@dataclass
class Meter:
    """One person's model calls through the guard: each reserves its estimate before
    it starts and books its real cost when it ends (failed or not).  Used for the
    turn's calls and for the summary calls compaction makes on its behalf."""

    guard: BudgetGuard
    user: str
    warn: Callable[[list[str]], Awaitable[None]] | None = None

    @asynccontextmanager
    async def call(self, estimate_usd: float, wait: Waiter | None = None) -> AsyncIterator[Bill]:
        """Raises :class:`BudgetRefused` (before the call) when over a limit.  A wait
        for calls in flight to settle runs under ``wait`` (a turn's
        ``interruptible``): what it raises ends the call before it starts."""
        reservation = await self.guard.reserve(self.user, estimate_usd, wait)
        bill = Bill()
        try:
            yield bill
        finally:
            if reservation:
                crossed = await self.guard.record(self.user, reservation, bill.cost_usd)
                if crossed and self.warn is not None:
                    await self.warn(crossed)
            elif bill.cost_usd:  # no limit set: counted all the same
                self.guard.book_later(self.user, bill.cost_usd)
