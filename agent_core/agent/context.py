"""Context monitor and compaction: keep the prompt inside the model's window.

Tokens are estimated (words × 1.3 + 4 per message), scaled by a per-session
ratio calibrated from what the provider reports.  The prompt counts the system
prompt and the tools' specs (``tokens.tools_tokens``) too, as the provider's
report does.  Against the window (CONTEXT_WINDOW, else the model's, else 100,000):

* above 80 %: move old turns to the thread's archive in Redis, keep the last 10;
* above 85 %: summarise old turns with the cheap model (temperature 0.3,
  ≤ 1,024 tokens; a reasoning model ≤ 16,384 with reasoning_effort "low", and
  an empty summary cut by the length limit is asked once more with 16,384),
  keep the last 5;
* above 95 %: truncate to the last 3 turns, no LLM call.

Steps repeat until the estimate is under 80 % or nothing is left to drop.
A turn start is a person's message that opened a turn (``session.starts_turn``),
never the loop's nudge or a message taken in mid-turn, so no cut falls inside
the current turn: when it alone is too big, its older tool results are
shortened instead (never the latest round's, which the model has not seen,
unless the prompt is still over 95 % or the provider refused it).
Summaries are built chunk by chunk (each chunk within a token budget, tool
results stripped first) and keep identifiers, decisions, open tasks and
commitments.  A failed summary falls back to truncation, never to an error;
a failed archive write never blocks the turn.  Summary calls go through the
person's budgets like the turn's own calls (given a :class:`Meter`): one over a
limit raises :class:`BudgetRefused` and leaves the history as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from agent_core.agent import metered
from agent_core.agent.budget import BudgetRefused, Meter
from agent_core.agent.session import Session, starts_turn
from agent_core.agent.tokens import estimate, text_tokens
from agent_core.llm.base import ChatMessage, CompletionRequest, LLMProvider
from agent_core.llm.schema import CUT_REASONS, FILTER_NOTE, LENGTH_NOTE

log = logging.getLogger(__name__)

MOVE_AT, SUMMARISE_AT, TRUNCATE_AT = 0.80, 0.85, 0.95
KEEP_MOVE, KEEP_SUMMARY, KEEP_TRUNCATE = 10, 5, 3
CHUNK_TOKENS = 6000
SHORT_RESULT_CHARS = 300  # what a shortened tool result keeps
SUMMARY_MAX_TOKENS = 1024
# a reasoning model (gpt-5, o3...) spends its answer budget on hidden reasoning
# first: its summary call gets this much (and reasoning_effort "low"), and an
# empty summary cut by the length limit is asked once more with this budget
REASONING_SUMMARY_MAX_TOKENS = 16_384
SUMMARY_TEMPERATURE = 0.3

SUMMARY_SYSTEM = (
    "You summarise a chat between a user and an AI assistant so the assistant can "
    "continue it without the full transcript. Keep every identifier (names, ids, file "
    "paths, URLs, numbers, dates), every decision made, open tasks and questions, and "
    "commitments the assistant made. Be factual and brief (at most 300 words). Write "
    "only the summary."
)


def _reasoning(provider: LLMProvider) -> bool:
    """Whether ``provider``'s model is a reasoning model (by its price table)."""
    try:
        return provider.model_info(None).reasoning
    except Exception:
        return False


def turn_starts(history: Sequence[ChatMessage]) -> list[int]:
    """Where turns start: the people's messages that opened them (never the loop's
    nudge or a message taken in mid-turn), so the last is the current turn's."""
    return [i for i, m in enumerate(history) if starts_turn(m)]


def keep_cut(history: Sequence[ChatMessage], turns: int) -> int:
    """Index where the last ``turns`` turns start (0 when there are not more)."""
    starts = turn_starts(history)
    if len(starts) <= turns:
        return 0
    return starts[-turns]


CUT_NOTE = "(the start of this conversation was cut to fit; carry on from here)"


def request_messages(history: Sequence[ChatMessage]) -> list[ChatMessage]:
    """``history`` as a request may carry it: starting with a user message.

    A history can start with Parley's own words (a routine's note after /new, a
    trim through a run of notes), which providers refuse (Anthropic: "first message
    must use the user role").  The text of those leading assistant messages is
    folded into the first user message as "(earlier, you wrote: …)"; their tool
    calls and the results of those calls go (they belong to a turn already cut).
    A history with no user message at all (a single turn longer than twice the
    limit, cut in its middle) keeps what it has after a short note in the user's
    place.  The history itself is left as it is."""
    lead = 0
    while lead < len(history) and history[lead].role not in ("user", "system"):
        lead += 1
    if lead == 0:
        return list(history)
    if lead == len(history):  # no user message at all: one long turn cut in its middle
        start = next((i for i, m in enumerate(history) if m.role != "tool"), len(history))
        return [ChatMessage("user", CUT_NOTE), *history[start:]]
    said = "\n\n".join(m.content.strip() for m in history[:lead] if m.role == "assistant")
    said = said.strip()
    rest = list(history[lead:])
    if not said:
        return rest
    earlier = f"(earlier, you wrote: {said})"
    if rest and rest[0].role == "user":
        rest[0] = replace(rest[0], content=f"{earlier}\n\n{rest[0].content}")
    else:
        rest.insert(0, ChatMessage("user", earlier))
    return rest


def _transcript(messages: Sequence[ChatMessage]) -> list[str]:
    lines: list[str] = []
    for m in messages:
        if m.role == "tool":
            lines.append(f"[result of {m.name or 'a tool'} omitted]")
        elif m.tool_calls:
            calls = ", ".join(f"{c.name}({str(c.arguments)[:200]})" for c in m.tool_calls)
            lines.append(f"assistant: {m.content}\n(called {calls})".strip())
        elif m.content:
            lines.append(f"{m.role}: {m.content}")
    return lines


def chunks(lines: list[str], budget: int) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    size = 0.0
    for line in lines:
        cost = text_tokens(line) + 1
        if cur and size + cost > budget:
            out.append("\n".join(cur))
            cur, size = [], 0.0
        if cost > budget:  # a single giant line: keep its head
            line = line[: max(1, int(len(line) * budget / cost))]
            cost = budget
        cur.append(line)
        size += cost
    if cur:
        out.append("\n".join(cur))
    return out


def _shorten_results(
    history: list[ChatMessage], keep_last: int = 2, *, fresh_too: bool = False
) -> int:
    """Shorten the tool results of the current turn (one request followed by many
    tool rounds can outgrow the window alone); each keeps its head and its call id,
    so every call still has its result.  The last ``keep_last`` stay whole, and so
    do the results of the latest round: the model has not seen them yet (cutting
    them would make it answer from 300 characters of what it just fetched).  Only
    ``fresh_too`` (nothing else left and the prompt still over the window's
    truncate level, where the call would fail) shortens those as well."""
    results = [i for i, m in enumerate(history) if m.role == "tool"]
    cut = results[: max(0, len(results) - keep_last)]
    if not fresh_too:
        last_round = next((i for i in range(len(history) - 1, -1, -1) if history[i].tool_calls), -1)
        cut = [i for i in cut if i < last_round]
    shortened = 0
    for i in cut:
        m = history[i]
        if len(m.content) > SHORT_RESULT_CHARS * 2:
            omitted = len(m.content) - SHORT_RESULT_CHARS
            history[i] = replace(
                m,
                content=m.content[:SHORT_RESULT_CHARS]
                + f"… [{omitted:,} characters omitted to fit the context window]",
            )
            shortened += 1
    return shortened


@dataclass
class Compaction:
    strategy: str  # moved | summarised | truncated | shortened
    dropped: int
    before: int
    after: int


Archive = Callable[[Session, list[ChatMessage]], Awaitable[None]]


class Compactor:
    def __init__(self, cheap: Callable[[], LLMProvider], archive: Archive) -> None:
        self.cheap = cheap
        self.archive = archive

    async def summarise(
        self,
        previous: str,
        old: Sequence[ChatMessage],
        session: Session | None = None,
        meter: Meter | None = None,
    ) -> str:
        """``previous`` summary extended with ``old``; each call's usage and cost is
        added to ``session`` (shown by /cost, /status) and, with a ``meter``, checked
        against and booked in the budgets (:class:`BudgetRefused` before a call)."""
        summary = previous
        for part in chunks(_transcript(old), CHUNK_TOKENS):
            prompt = (
                f"Summary so far:\n{summary}\n\n" if summary else ""
            ) + f"Conversation to add:\n{part}\n\nWrite the updated summary."
            messages = (ChatMessage("system", SUMMARY_SYSTEM), ChatMessage("user", prompt))
            provider = self.cheap()
            budget = REASONING_SUMMARY_MAX_TOKENS if _reasoning(provider) else SUMMARY_MAX_TOKENS
            req = CompletionRequest(
                messages=messages,
                max_tokens=budget,
                temperature=SUMMARY_TEMPERATURE,
                reasoning_effort="low",
            )
            while True:
                result, cost = await metered.complete(provider, req, meter)
                if session is not None:
                    session.usage = session.usage + result.usage
                    session.cost_usd += cost
                # a summary cut by the length limit (or the content filter) is kept as
                # far as it goes, without the note meant for a person (it would sit in
                # every later system prompt)
                text = result.text.replace(LENGTH_NOTE, "").replace(FILTER_NOTE, "").strip()
                if text or result.finish_reason not in CUT_REASONS:
                    break
                if (req.max_tokens or 0) >= REASONING_SUMMARY_MAX_TOKENS:
                    break
                # nothing written before the limit: the budget went to reasoning
                log.info("summary came back empty at %s tokens; asking again", req.max_tokens)
                req = replace(req, max_tokens=REASONING_SUMMARY_MAX_TOKENS)
            if not text:
                raise ValueError("empty summary")
            summary = text
        return summary

    async def _drop(
        self, session: Session, history: list[ChatMessage], cut: int
    ) -> list[ChatMessage]:
        old = history[:cut]
        del history[:cut]  # in place: the running loop holds this list
        await self.archive(session, old)
        return old

    async def compact(
        self,
        session: Session,
        history: list[ChatMessage],
        window: int,
        *,
        system_tokens: int = 0,
        force: str = "",
        refused: bool = False,
        meter: Meter | None = None,
    ) -> Compaction | None:
        """Bring ``history`` under the thresholds (or apply ``force``: summarise | truncate).

        ``system_tokens``: the prompt's fixed part as the history's estimate counts
        it (the system prompt and the tools' specs, scaled by the session's ratio).
        ``refused``: the provider refused this prompt as too long, so the estimate
        of it is too low: it is counted as at least the whole window, and the
        history is brought under the thresholds by that measure (older turns
        summarised, then tool results shortened, the latest round's too).

        A summary refused by the budgets raises :class:`BudgetRefused`: nothing is
        dropped (truncating instead would lose the turns the summary was to keep)."""
        before = estimate(history, session.token_ratio) + system_tokens
        forced = bool(force)  # the provider refused the prompt, or /compact
        # what was refused filled the window at least, whatever the estimate said
        scale = max(1.0, window / max(1, before)) if refused else 1.0
        applied = ""
        dropped = 0
        for _ in range(4):
            used = estimate(history, session.token_ratio) + system_tokens
            fill = used * scale / max(1, window)
            if force:
                level, force = force, ""
            elif fill > TRUNCATE_AT:
                level = "truncate"
            elif fill > SUMMARISE_AT:
                level = "summarise"
            elif fill > MOVE_AT:
                level = "move"
            else:
                break
            keep = {"move": KEEP_MOVE, "summarise": KEEP_SUMMARY, "truncate": KEEP_TRUNCATE}[level]
            # fewer turns than the level keeps: keep fewer at the same level (a short
            # conversation with a long document is summarised, not cut), down to the
            # current turn
            turns = len(turn_starts(history))
            cut = keep_cut(history, min(keep, max(1, turns - 1)))
            if cut == 0:  # only the current turn is left: shorten its older tool results
                if level != "move" and (
                    _shorten_results(history)
                    or (
                        (forced or level == "truncate")
                        and _shorten_results(history, fresh_too=True)
                    )
                ):
                    applied = "shortened"
                    continue
                break
            if level == "summarise":
                try:
                    session.summary = await self.summarise(
                        session.summary, history[:cut], session, meter
                    )
                    applied = "summarised"
                except BudgetRefused:
                    raise
                except Exception as exc:  # never an error: truncate instead
                    log.warning("[%s] summary failed (%s); truncating instead", session.thread, exc)
                    level, cut = "truncate", keep_cut(history, KEEP_TRUNCATE) or cut
            dropped += len(await self._drop(session, history, cut))
            if level != "summarise":
                applied = {"move": "moved", "truncate": "truncated"}[level]
        if not applied:
            return None
        after = estimate(history, session.token_ratio) + system_tokens
        log.info(
            "[%s] context %s: %d messages out, ~%d -> ~%d tokens",
            session.thread,
            applied,
            dropped,
            before,
            after,
        )
        return Compaction(applied, dropped, before, after)
