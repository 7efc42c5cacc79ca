"""Notes tables that loop or do not, for the note-level repetition tests."""

from __future__ import annotations

import numpy as np

from signalchain.symbolic.notes import notes_table


def bar_of(rng: np.random.Generator, example: int = 0, start: float = 0.0) -> list[tuple]:
    """Eight random eighth notes of one 4/4 bar."""
    return [(example, int(rng.integers(50, 80)), start + 0.5 * i, 0.5, 80, 0, 0) for i in range(8)]


def looped(rng: np.random.Generator, bars: int = 8, example: int = 0) -> np.ndarray:
    """One random bar played `bars` times."""
    one = bar_of(rng, example)
    return notes_table([(e, p, o + 4.0 * b, d, v, pr, dr) for b in range(bars) for e, p, o, d, v, pr, dr in one])


def varied(rng: np.random.Generator, bars: int = 8, example: int = 0) -> np.ndarray:
    """`bars` different random bars."""
    return notes_table([r for b in range(bars) for r in bar_of(rng, example, 4.0 * b)])
