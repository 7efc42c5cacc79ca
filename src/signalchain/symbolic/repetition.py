"""Repetition measured on notes rather than tokens: repeated n-grams of (pitch interval, inter-onset
interval, duration) and the longest stretch of bars that repeats with one period.

Intervals and timing, not absolute pitches: a phrase sequenced up a tone still counts as a repeat,
as a listener hears it. Drums are left out when there is anything else (their patterns repeat every
bar in most music; the baseline would carry them anyway). Pure numpy, on a notes table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .notes import COL, per_example

__all__ = ["NoteRepetition", "note_repetition", "batch_repetition", "NGRAM", "GRID"]

NGRAM = 4
GRID = 0.25  # quarter notes: onsets and durations are compared on a sixteenth-note grid


@dataclass
class NoteRepetition:
    """One example's repetition: share of repeated n-grams, the longest loop (in bars) and its period."""

    notes: int
    ngram_repetition: float  # share of the n-grams already seen earlier in the example
    loop_bars: int  # bars covered by the longest run repeating with one period (period included)
    loop_period: int  # that period, in bars (0: no loop)
    bars: int
    loop_share: float  # loop_bars / bars

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _melodic(rows: np.ndarray) -> np.ndarray:
    pitched = rows[rows[:, COL["drum"]] < 0.5]
    rows = pitched if len(pitched) else rows
    return rows[np.lexsort((-rows[:, COL["pitch"]], rows[:, COL["onset"]]))]


def _ngram_share(rows: np.ndarray, n: int) -> float:
    if len(rows) < n + 1:
        return 0.0
    q = np.round(rows[:, [COL["onset"], COL["duration"]]] / GRID).astype(np.int64)
    feats = np.stack([np.diff(rows[:, COL["pitch"]]).astype(np.int64), np.diff(q[:, 0]), q[1:, 1]], axis=1)
    grams = [tuple(feats[i:i + n].ravel().tolist()) for i in range(len(feats) - n + 1)]
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams)


def _bars(rows: np.ndarray, bar: float) -> list[frozenset[tuple[int, int, int]]]:
    if not len(rows):
        return []
    index = np.floor(rows[:, COL["onset"]] / bar + 1e-6).astype(np.int64)
    within = np.round((rows[:, COL["onset"]] - index * bar) / GRID).astype(np.int64)
    dur = np.round(rows[:, COL["duration"]] / GRID).astype(np.int64)
    out: list[set[tuple[int, int, int]]] = [set() for _ in range(int(index.max()) + 1)]
    for i, p, w, d in zip(index, rows[:, COL["pitch"]].astype(np.int64), within, dur):
        out[int(i)].add((int(p), int(w), int(d)))
    return [frozenset(b) for b in out]


def _longest_loop(bars: list[frozenset[tuple[int, int, int]]]) -> tuple[int, int]:
    """(bars covered, period) of the longest run where bar i equals bar i + period (non-empty bars)."""
    best, best_period = 0, 0
    for period in range(1, len(bars) // 2 + 1):
        run = 0
        for i in range(len(bars) - period):
            run = run + 1 if bars[i] and bars[i] == bars[i + period] else 0
            if run and run + period > best:
                best, best_period = run + period, period
    return best, best_period


def note_repetition(rows: np.ndarray, bar_quarters: float = 4.0, n: int = NGRAM) -> NoteRepetition:
    """Repetition of one example's notes (`bar_quarters`: the bar length in quarter notes)."""
    rows = _melodic(np.asarray(rows, dtype=np.float64).reshape(-1, len(COL)))
    bars = _bars(rows, bar_quarters)
    loop, period = _longest_loop(bars)
    return NoteRepetition(notes=len(rows), ngram_repetition=_ngram_share(rows, n), loop_bars=loop,
                          loop_period=period, bars=len(bars), loop_share=loop / len(bars) if bars else 0.0)


def batch_repetition(table: np.ndarray, n_examples: int | None = None,
                     bar_quarters: float | list[float] = 4.0) -> list[NoteRepetition]:
    """`note_repetition` of each example of a notes table."""
    groups = per_example(table, n_examples)
    bars = bar_quarters if isinstance(bar_quarters, list) else [bar_quarters] * len(groups)
    return [note_repetition(g, b) for g, b in zip(groups, bars)]
