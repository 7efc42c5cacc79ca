"""Per-rank section clock: how long each step spends in loader, forward, backward, optimizer, other.

Cheap by design (a `perf_counter` pair and a run-queue read per section, a dict add: ~10 µs);
summaries are made only at an exchange, over the window since the previous one.

Times are *the rank's own*: the time the thread was ready to run but waited for a CPU (Linux
`/proc/thread-self/schedstat`, the run-queue delay) is taken out of every section. On an
oversubscribed host (more ranks than cores, a neighbour's job) a rank is descheduled at random
for whole scheduler slices, which on a short step is many times its forward; that is the
machine's noise, not a straggler. A rank that is slow because it *works* longer, sleeps, or waits
for its data keeps its time. Where the kernel does not say, the delay reads as 0.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import mean, median
from time import perf_counter

from ..records.distributed import SECTIONS, SYNC_SECTIONS

__all__ = ["SectionClock", "run_queue_delay"]

_fds = threading.local()  # one open schedstat per thread (thread-self resolves when opened)


def run_queue_delay() -> float:
    """Seconds the calling thread has spent runnable but not running, so far (0.0: unknown)."""
    fd = getattr(_fds, "fd", None)
    try:
        if fd is None:
            fd = _fds.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        if fd < 0:
            return 0.0
        return int(os.pread(fd, 128, 0).split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        _fds.fd = -1  # not Linux, or no schedstat: do not try again on this thread
        return 0.0


class SectionClock:
    """Accumulates section times within a step; `end_step` closes the step's row."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # add_time may come from a loader thread
        self._cur = dict.fromkeys(SECTIONS, 0.0)
        self._rows: list[dict[str, float]] = []
        self._t0, self._d0 = perf_counter(), run_queue_delay()
        self.sync: set[str] = set(SYNC_SECTIONS)
        self.current: str | None = None  # the section being timed now (read by the stall hook)
        self._open: tuple[str, float, float] | None = None  # (section, since, run-queue delay then): `enter`

    def enter(self, name: str | None) -> None:
        """The rank is in section `name` from now on (None: in none); the open one is closed and
        counted. For callers that see boundaries (trainer hooks), not whole sections."""
        t, d = perf_counter(), run_queue_delay()
        self._close_open(t, d)
        self._open = (name, t, d) if name else None
        self.current = name

    def _close_open(self, t: float, d: float) -> None:
        if self._open is not None:
            name, t0, d0 = self._open
            self.add(name, t - t0 - (d - d0))
            self._open = (name, t, d)

    @contextmanager
    def section(self, name: str, sync: bool = False) -> Iterator[None]:
        t, d, outer = perf_counter(), run_queue_delay(), self.current
        self.current = name
        try:
            yield
        finally:
            self.current = outer
            self.add(name, perf_counter() - t - (run_queue_delay() - d), sync)

    def collective(self, seconds: float) -> None:
        """`seconds` spent inside a collective during the open section: synchronisation, not that
        section's compute. Counted in "collective" and taken out of the section it ran in (which
        counts its whole wall time when it closes); outside every section it leaves "other" by itself."""
        seconds = max(0.0, float(seconds))
        key = self.current if self.current in SECTIONS else ("other" if self.current else None)
        with self._lock:
            self._cur["collective"] += seconds
            if key is not None and key != "collective":
                self._cur[key] -= seconds

    def add(self, name: str, seconds: float, sync: bool = False) -> None:
        # An unknown name is counted as "other": the exchanged layout is fixed (SECTIONS).
        key = name if name in SECTIONS else "other"
        if sync:
            self.sync.add(key)
        with self._lock:
            self._cur[key] += max(0.0, float(seconds))

    def end_step(self) -> None:
        """Close the current step: the wall time not covered by a section goes to "other"."""
        now, delay = perf_counter(), run_queue_delay()
        self._close_open(now, delay)  # an open section counts up to here, and goes on in the next step
        with self._lock:
            row, self._cur = self._cur, dict.fromkeys(SECTIONS, 0.0)
        for k in row:  # a collective taken out of a section still open at a step's end: its rest comes next step
            row[k] = max(0.0, row[k])
        wall = now - self._t0 - (delay - self._d0)
        covered = sum(row.values())
        row["other"] += max(0.0, wall - covered)
        row["step"] = max(wall, covered)
        self._rows.append(row)
        self._t0, self._d0 = now, delay

    def restart(self) -> None:
        """Start the next step's wall clock now (after signalchain's own exchange)."""
        self._t0, self._d0 = perf_counter(), run_queue_delay()
        if self._open is not None:  # signalchain's own exchange is nobody's section
            self._open = (self._open[0], self._t0, self._d0)

    def window(self) -> tuple[int, dict[str, float], dict[str, float], float]:
        """(steps, mean per section, median per section, median step) over the window; clears it."""
        rows, self._rows = self._rows, []
        if not rows:
            zero = dict.fromkeys(SECTIONS, 0.0)
            return 0, zero, dict(zero), 0.0
        means = {s: mean(r[s] for r in rows) for s in SECTIONS}
        medians = {s: median(r[s] for r in rows) for s in SECTIONS}
        return len(rows), means, medians, median(r["step"] for r in rows)
