"""The turn's deadline, and the waits for a platform that do not count toward it.

A turn runs under ``TURN_TIMEOUT_SECS`` (``agent_core.proactive.recovery``), as
an ``asyncio.Timeout`` that :func:`turn_deadline` makes visible here (a
ContextVar: the turn's task, and the tasks it starts, see it).  The time a turn
spends waiting out a platform's rate limit (a Retry-After, a pace another
worker paused after a 429, the pacing slot of a message the answer needs) is
the platform's, not the turn's: whoever waits calls :func:`platform_wait`, or
:func:`held` around a wait of its own, and the deadline moves back by as long.
So a Telegram ``retry after 3600`` no longer cancels a turn that times out at
600 s: the answer goes out once the wait is over, as the platform asked.

Droppable calls (a streamed preview's edit, the typing indicator) never wait and
never move the deadline: work started for one runs :func:`outside_turn` (a task
copies the ContextVar, and whatever it waits would move the turn's deadline).
Outside a turn (no deadline set) these only wait.

The deadline moves back by :data:`MAX_PLATFORM_WAIT_SECS` in all at most (a
platform that keeps answering 429 would otherwise stretch a turn without end,
holding its thread and a worker's slot): a wait past that counts toward the
turn's clock, and the reply writer hands the turn back instead of waiting
(:func:`waited` is what the turn has waited so far).
Platform-free: the channels call it, it knows none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

# The most a turn's deadline moves back for the platform, all its waits together
# (the same hour a handed-back thread is held at most: agent_core.worker).
MAX_PLATFORM_WAIT_SECS = 3600.0


class _Clock:
    """A turn's deadline and how far it has moved back so far."""

    __slots__ = ("moved", "timeout")

    def __init__(self, timeout: asyncio.Timeout) -> None:
        self.timeout = timeout
        self.moved = 0.0


_TURN: ContextVar[_Clock | None] = ContextVar("parley_turn_deadline", default=None)


@contextlib.contextmanager
def turn_deadline(timeout: asyncio.Timeout | None) -> Iterator[None]:
    """Within this block (the turn), :func:`hold` moves ``timeout`` back."""
    token = _TURN.set(None if timeout is None else _Clock(timeout))
    try:
        yield
    finally:
        _TURN.reset(token)


@contextlib.contextmanager
def outside_turn() -> Iterator[None]:
    """Within this block no turn's deadline is seen (nor moved): for droppable
    work a turn starts as a task of its own (a streamed preview's edit), which
    would otherwise copy the turn's deadline and move it by waits it skips."""
    token = _TURN.set(None)
    try:
        yield
    finally:
        _TURN.reset(token)


def turn_expired() -> bool:
    """Whether the turn's deadline has run out: a CancelledError seen inside the
    turn then comes from ``TURN_TIMEOUT_SECS`` (else: /interrupt's own cancel of
    a wait, a shutdown), and a streamed preview may still be marked as cut off."""
    clock = _TURN.get()
    return clock is not None and clock.timeout.expired()


def waited() -> float:
    """How far the current turn's deadline has moved back for the platform (0
    outside a turn)."""
    clock = _TURN.get()
    return 0.0 if clock is None else clock.moved


def _move(secs: float) -> float:
    """Move the deadline by ``secs`` (negative: forward), never back past
    :data:`MAX_PLATFORM_WAIT_SECS` in all; how far it moved."""
    clock = _TURN.get()
    if clock is None:
        return 0.0
    tm = clock.timeout
    if tm.expired():
        return 0.0
    when = tm.when()
    if when is None:
        return 0.0
    secs = min(secs, MAX_PLATFORM_WAIT_SECS - clock.moved)
    if secs == 0:
        return 0.0
    try:
        tm.reschedule(when + secs)
    except RuntimeError:  # the turn's block has ended (a task it started, waiting
        return 0.0  # on after it): nothing to move
    clock.moved += secs
    return secs


def hold(secs: float) -> None:
    """The turn (if any) is about to wait ``secs`` for the platform: its deadline
    moves back by that much."""
    if secs > 0:
        _move(secs)


@contextlib.contextmanager
def held(secs: float) -> Iterator[None]:
    """A wait for the platform of at most ``secs`` runs in this block: the deadline
    moves back by ``secs`` before it, and what the wait did not use (it ended
    early: /interrupt, a shutdown) is taken off again after it."""
    if secs <= 0:
        yield
        return
    loop = asyncio.get_running_loop()
    start = loop.time()
    moved = _move(secs)
    try:
        yield
    finally:
        unused = min(secs - (loop.time() - start), moved)
        if unused > 0:
            _move(-unused)


async def platform_wait(secs: float) -> None:
    """Sleep ``secs`` for the platform, off the turn's clock."""
    if secs <= 0:
        return
    with held(secs):
        await asyncio.sleep(secs)
