"""How late this machine wakes a sleeping process: ``python bench/jitter.py [secs]``.

Sleeps 1 ms over and over and prints how much later than asked each wake-up came
(p50 / p99 / p99.9 / max).  On a quiet dedicated core the p99 is well under 0.1 ms;
a shared VM's scheduler shows in the tail.  Run it alone, before a benchmark, to tell
the box's stalls from the code's (bench/README.md, 2026-11-24).
"""

from __future__ import annotations

import sys
import time


def main() -> None:
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 15.0
    late: list[float] = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        t = time.monotonic()
        time.sleep(0.001)
        late.append((time.monotonic() - t - 0.001) * 1000)
    late.sort()
    n = len(late)
    print(
        f"{n} wake-ups: late by p50 {late[n // 2]:.3f} ms, p99 {late[int(n * 0.99)]:.3f} ms, "
        f"p99.9 {late[int(n * 0.999)]:.3f} ms, max {late[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
