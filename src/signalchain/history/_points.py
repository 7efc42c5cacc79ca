"""Collect logged points by metric name, then turn them into `Series` (numpy arrays) in one go.

Readers append one point at a time (a JSON entry, an event, a CSV row); a list append is the cheapest
thing Python does per point, and the arrays are built once at the end, so a 10^6-point log costs one
pass over the file.
"""

from __future__ import annotations

import math
from typing import Any

from ..records.history import RunHistory, Series

__all__ = ["Points", "number"]


def number(value: Any) -> float | None:
    """A logged value as a float: numbers, numeric strings, and the non-finite spellings loggers use
    ("nan", "NaN", "inf", "-Infinity"); None for anything else (a text field, a list, an empty cell)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return float(text)
        except ValueError:
            low = text.lower()
            if low in ("nan", "+nan", "-nan"):
                return math.nan
            if low in ("infinity", "+infinity"):
                return math.inf
            if low == "-infinity":
                return -math.inf
    return None


class Points:
    """name -> parallel lists of (step, value, wall, epoch); wall and epoch may be None per point."""

    def __init__(self) -> None:
        self._cols: dict[str, tuple[list[int], list[float], list[float], list[float]]] = {}
        self._sources: dict[str, str] = {}
        self._has_wall: dict[str, bool] = {}
        self._has_epoch: dict[str, bool] = {}

    def add(
        self,
        name: str,
        step: int,
        value: float,
        wall: float | None = None,
        epoch: float | None = None,
        source: str = "",
    ) -> None:
        col = self._cols.get(name)
        if col is None:
            col = self._cols[name] = ([], [], [], [])
            self._sources[name] = source
            self._has_wall[name] = False
            self._has_epoch[name] = False
        col[0].append(step)
        col[1].append(value)
        col[2].append(math.nan if wall is None else wall)
        col[3].append(math.nan if epoch is None else epoch)
        if wall is not None:
            self._has_wall[name] = True
        if epoch is not None:
            self._has_epoch[name] = True

    def __len__(self) -> int:
        return sum(len(c[0]) for c in self._cols.values())

    def into(self, run: RunHistory) -> RunHistory:
        for name, (steps, values, wall, epochs) in self._cols.items():
            run.add(
                Series(
                    name,
                    steps,
                    values,
                    wall if self._has_wall[name] else None,
                    epochs if self._has_epoch[name] else None,
                    source=self._sources[name],
                )
            )
        return run
