"""Options shared by the `parley bench` scenarios, and a number formatter."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Options:
    quick: bool = False
    rate: float = 100.0  # turns/s of the fixed-rate phase
    duration: float = 10.0  # seconds per measured phase
    users: int = 64  # closed-loop users at saturation
    floor_pools: tuple[int, ...] = (64,)
    llm_latency: float = 2.0  # inflight
    target: int = 5000  # inflight
    worker_concurrency: int = 0  # inflight: WORKER_CONCURRENCY (0 = target + 500)
    sessions: tuple[int, ...] = (1_000, 100_000, 1_000_000)
    stream_turns: int = 20
    rounds: int = 3  # turns: alternating fixed-rate rounds per system

    def tiny(self) -> Options:
        return Options(
            quick=True,
            rate=30.0,
            duration=1.5,
            users=8,
            floor_pools=self.floor_pools[-1:],
            llm_latency=0.5,
            target=60,
            sessions=(200, 2_000),
            stream_turns=2,
            rounds=2,
        )


def fmt_ms(x: float) -> str:
    return f"{x:.2f}"


# --- floor / turns -----------------------------------------------------------------
