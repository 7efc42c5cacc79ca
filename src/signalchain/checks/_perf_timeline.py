"""The performance judge's view of a timing record: each update's own time on a shared machine, with
its bounds, and which updates are the steady state.

*Own time.* An update's wall time less its loop thread's run-queue delay (time it was runnable while
other processes held the cores) is what the thread did: computed, or blocked on I/O, a lock, a
worker. That is the estimate (`waits`, `comps`). It is an upper bound of the idle machine's time:
the thread may also have blocked waiting for its own other threads (torch's or OpenBLAS's pool)
while other processes held *them*; their run-queue delay bounds that, so wall less every thread's
delay is a lower bound (`*_lo`). On one thread, or an idle machine, the bounds meet. Where only the
sum over threads was read (older records), the estimate is the wall time and the bound the same.

*Steady state.* Position 0 of each pass pays for a fresh iterator (worker start-up). Beyond that, a
run's first batches can pay what later ones do not (the first decode of a clip, a cache filling,
workers warming up); two rules find it in the run itself:

- *warm-up*: the first pass's waits split where a slow prefix (at most half the pass) stands clear
  of the rest: the split that best fits two medians (least absolute deviation), taken only when
  the prefix holds at least two batches after position 0, each above the rest's 90th percentile,
  their median at least twice the rest's and 20 ms above it (on log-normal noise twice the
  reference's spread, two batches in a row twice the median: a few in 10^5);
- *cold pass*: a second pass over the loader (a fresh iterator; a seeded loader gives the same
  batches) waits less than the first pass on every batch, position by position, and at most half
  as long in the median: the first pass filled a cache (7 of 7 pairs faster happens by chance once
  in 128). The steady state is then the second pass alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median

from ..records.performance import PerfMeasurement

__all__ = ["Timeline", "timeline", "warmup_length", "cold_pass", "quantile"]

BUSY_SHARE = 0.5  # an update whose thread queued this much of its wall time is said to be on a busy machine
WARMUP_MIN = 3  # position 0 and two more
WARMUP_QUANTILE = 0.9
WARMUP_RATIO = 2.0
WARMUP_FLOOR_S = 0.02
COLD_RATIO = 0.5
COLD_PAIRS = 3


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty sequence."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def warmup_length(waits: Sequence[float]) -> int:
    """Length of the first pass's slow prefix (1 when there is none: position 0 is the fresh iterator
    alone). See the module doc; position 0 is always slow, so the prefix must hold 2 more."""
    n = len(waits)
    best, best_cost = 1, None
    for k in range(WARMUP_MIN, n // 2 + 1):
        head, tail = waits[:k], waits[k:]
        mh, mt = median(head), median(tail)
        cost = sum(abs(x - mh) for x in head) + sum(abs(x - mt) for x in tail)
        if best_cost is None or cost < best_cost:
            best, best_cost = k, cost
    if best < WARMUP_MIN:
        return 1
    head, tail = waits[1:best], waits[best:]
    mh, mt = median(head), median(tail)
    if min(head) > quantile(tail, WARMUP_QUANTILE) and mh >= WARMUP_RATIO * mt and mh - mt >= WARMUP_FLOOR_S:
        return best
    return 1


def cold_pass(first: Sequence[float], second: Sequence[float]) -> bool:
    """Whether the second pass (positions from its own 1 on, paired with the first pass's) shows the
    first one to have been a cold start."""
    pairs = list(zip(first[1:], second[1:]))
    if len(pairs) < COLD_PAIRS:
        return False
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    return all(y < x for x, y in pairs) and median(b) <= COLD_RATIO * median(a)


@dataclass
class Timeline:
    """Per position: seconds of each wait and update, own time (estimate) and its lower bound."""

    waits: dict[int, float]
    comps: dict[int, float]
    waits_lo: dict[int, float]
    comps_lo: dict[int, float]
    first: int  # positions < first are the first pass
    n: int
    warmup: int = 1  # the first pass's positions < warmup are its warm-up
    cold: bool = False  # the whole first pass was a cold start (see the module doc)
    busy: list[int] = field(default_factory=list)  # updates whose thread queued >= BUSY_SHARE of their wall
    queued: float | None = None  # seconds the loop thread queued for a CPU, over all updates (None: unknown)
    others: float | None = None  # seconds the process's other threads queued (None: unknown)
    wall: float = 0.0
    bounded: bool = True  # False: only the sum over threads is known, so the estimate is the wall time
    comp_one: float | None = None  # median own time of the updates timed again on one intra-op thread

    @property
    def first_pass(self) -> range:
        return range(self.first)

    @property
    def steady_waits(self) -> list[int]:
        """Positions whose wait is the loader's steady state."""
        second = [i for i in range(self.first + 1, self.n) if i in self.waits]
        if self.cold:
            return second
        return [i for i in range(self.warmup, self.first) if i in self.waits] + second

    @property
    def steady_comps(self) -> list[int]:
        """The first pass's updates after its first (a second pass may hit caches a real run's fresh
        batches would miss, e.g. a codec's code cache)."""
        return [i for i in range(1, self.first) if i in self.comps]


def _at(xs: Sequence[float], i: int) -> float | None:
    return xs[i] if i < len(xs) else None


def timeline(rep: PerfMeasurement) -> Timeline:
    n = len(rep.computes)
    first = rep.reread_from if rep.reread_from is not None and 0 < rep.reread_from < n else n
    own = len(rep.compute_queued) == n
    every = len(rep.compute_delays) == n
    waits, comps, waits_lo, comps_lo = {}, {}, {}, {}
    busy: list[int] = []
    queued = others = 0.0
    wall = 0.0
    for i in range(n):
        w = _at(rep.waits, i)
        parts = [("c", rep.computes[i], _at(rep.compute_queued, i) if own else None,
                  _at(rep.compute_delays, i) if every else None)]
        if w is not None:
            parts.append(("w", w, _at(rep.wait_queued, i) if own else None, _at(rep.wait_delays, i) if every else None))
        q_update = 0.0
        for kind, t, q, d in parts:
            wall += t
            q = min(max(q or 0.0, 0.0), t)
            other = max((d or 0.0) - q, 0.0) if own else min(max(d or 0.0, 0.0), t)
            est = t - q
            lo = max(est - other, 0.0)
            q_update += q if own else min(d or 0.0, t)
            queued += q
            others += other if own else max(d or 0.0, 0.0)  # summed over threads: may exceed the wall
            (comps if kind == "c" else waits)[i] = est
            (comps_lo if kind == "c" else waits_lo)[i] = lo
        if q_update >= BUSY_SHARE * (rep.computes[i] + (w or 0.0)):
            busy.append(i)
    tl = Timeline(waits, comps, waits_lo, comps_lo, first, n, busy=busy, wall=wall, bounded=own,
                  queued=queued if own else None, others=others if every else None)
    if rep.one_thread:
        tl.comp_one = median(rep.one_thread)
    fp = [waits[i] for i in range(first) if i in waits]
    if len(fp) == first and first >= 5:
        tl.warmup = warmup_length(fp)
    if first < n and fp:
        second = [waits[i] for i in range(first, n) if i in waits]
        tl.cold = cold_pass(fp, second)
    return tl
