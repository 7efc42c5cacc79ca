"""Delays that keep their size on any machine: a fault's cost measured against the work around it.

A fixed sleep calibrated on one machine shrinks to noise on a slower one (a 50 ms slow worker
beside a loader that renders each batch in 120 ms is no longer a slow worker). Real costs scale
with the machine too: a re-spawned worker re-imports torch as slowly as the first one did. So the
performance faults time the code they wrap and size their delay as a multiple of it, never below
a floor. Detectors never read these numbers; they see only the wall-clock time that results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from statistics import median
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["Pace", "timed", "timed_call"]


class Pace:
    """The seconds each call of the wrapped work took, so far."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def add(self, seconds: float) -> None:
        self.seconds.append(seconds)

    def typical(self) -> float:
        return median(self.seconds) if self.seconds else 0.0

    def longest(self) -> float:
        return max(self.seconds, default=0.0)

    def scaled(self, factor: float, floor: float, of: Callable[[Pace], float] = typical) -> float:
        """`factor` × the work's typical (or other) time, at least `floor` seconds."""
        return max(floor, factor * of(self))


def timed(items: Iterable[T], pace: Pace) -> Iterator[T]:
    """Yield from `items`, adding to `pace` how long each item took to produce."""
    it = iter(items)
    while True:
        t0 = time.perf_counter()
        try:
            item = next(it)
        except StopIteration:
            return
        pace.add(time.perf_counter() - t0)
        yield item


def timed_call(fn: Callable[..., Any], pace: Pace) -> Callable[..., Any]:
    """`fn`, adding to `pace` how long each call took."""

    def call(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            pace.add(time.perf_counter() - t0)

    return call
