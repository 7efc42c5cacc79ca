"""A clock that a loaded machine cannot move, for the tests of timing faults.

A fault that makes a run wait does it with `time.sleep` (standing in for I/O, a re-spawn, an
upload). Timing it with the wall clock makes the test a race against the machine: on a loaded or
slow one, compute stretches and sleeps oversleep, and a relation such as "the step waits longer than
it computes" flips. `FakeClock` replaces the `time` module of the code under test: a sleep returns
at once and is recorded (how long, in which order), and the clock advances by exactly what was
slept plus the CPU time of the calling thread (which a descheduled thread does not accumulate).
Tests then assert counts, orderings and sizes of the waits the fault itself makes.
"""

from __future__ import annotations

import time as _time
from types import ModuleType
from typing import Any


class FakeClock:
    """Stands in for the `time` module: `sleep` records and returns, `perf_counter`/`monotonic`/
    `time` read CPU time of this thread plus the seconds slept so far; anything else is the real one."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.slept = 0.0

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(float(seconds))
        self.slept += float(seconds)

    def perf_counter(self) -> float:
        return _time.thread_time() + self.slept

    monotonic = perf_counter
    time = perf_counter

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)

    def mark(self) -> int:
        """A position in the record of sleeps: `since(mark)` lists those made after it."""
        return len(self.sleeps)

    def since(self, mark: int) -> list[float]:
        return self.sleeps[mark:]


def install(monkeypatch: Any, *modules: ModuleType) -> FakeClock:
    """A `FakeClock` as the `time` of each module (they `import time` and call `time.sleep`)."""
    clock = FakeClock()
    for module in modules:
        monkeypatch.setattr(module, "time", clock)
    return clock
