"""Per-rank section clock: how long each step spends in loader, forward, backward, optimizer, other.

Cheap by design (one `perf_counter` pair per section, a dict add); summaries are made only at an
exchange, over the window since the previous one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import mean, median
from time import perf_counter

from ..records.distributed import SECTIONS, SYNC_SECTIONS

__all__ = ["SectionClock"]


class SectionClock:
    """Accumulates section times within a step; `end_step` closes the step's row."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # add_time may come from a loader thread
        self._cur = dict.fromkeys(SECTIONS, 0.0)
        self._rows: list[dict[str, float]] = []
        self._t0 = perf_counter()
        self.sync: set[str] = set(SYNC_SECTIONS)

    @contextmanager
    def section(self, name: str, sync: bool = False) -> Iterator[None]:
        t = perf_counter()
        try:
            yield
        finally:
            self.add(name, perf_counter() - t, sync)

    def add(self, name: str, seconds: float, sync: bool = False) -> None:
        # An unknown name is counted as "other": the exchanged layout is fixed (SECTIONS).
        key = name if name in SECTIONS else "other"
        if sync:
            self.sync.add(key)
        with self._lock:
            self._cur[key] += max(0.0, float(seconds))

    def end_step(self) -> None:
        """Close the current step: the wall time not covered by a section goes to "other"."""
        now = perf_counter()
        with self._lock:
            row, self._cur = self._cur, dict.fromkeys(SECTIONS, 0.0)
        wall = now - self._t0
        covered = sum(row.values())
        row["other"] += max(0.0, wall - covered)
        row["step"] = max(wall, covered)
        self._rows.append(row)
        self._t0 = now

    def restart(self) -> None:
        """Start the next step's wall clock now (after signalchain's own exchange)."""
        self._t0 = perf_counter()

    def window(self) -> tuple[int, dict[str, float], dict[str, float], float]:
        """(steps, mean per section, median per section, median step) over the window; clears it."""
        rows, self._rows = self._rows, []
        if not rows:
            zero = dict.fromkeys(SECTIONS, 0.0)
            return 0, zero, dict(zero), 0.0
        means = {s: mean(r[s] for r in rows) for s in SECTIONS}
        medians = {s: median(r[s] for r in rows) for s in SECTIONS}
        return len(rows), means, medians, median(r["step"] for r in rows)
