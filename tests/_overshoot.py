"""Float audio beyond full scale, made to order: `hot(peak_db=7.8, share=0.0017)` is a 2 s note whose
peak sits at +7.8 dBFS and whose samples lie beyond full scale in 0.17% of places (the listen report
in issue 24); `clean(peak_db=-1.0)` is the same note kept below full scale."""

from __future__ import annotations

import numpy as np

SR = 16000


def clean(peak_db: float = -1.0, seconds: float = 2.0) -> np.ndarray:
    """A decaying two-partial note whose peak is exactly `peak_db` dBFS. [T] float32."""
    t = np.arange(int(seconds * SR)) / SR
    x = (np.sin(2 * np.pi * 220 * t) + 0.3 * np.sin(2 * np.pi * 660 * t)) * np.exp(-0.5 * t)
    return (x * 10 ** (peak_db / 20) / np.abs(x).max()).astype(np.float32)


def hot(peak_db: float = 7.8, share: float = 0.0017, seconds: float = 2.0, seed: int = 0) -> np.ndarray:
    """`clean(-6)` with `share` of its samples pushed past full scale (between 1.05 and the peak), one of
    them at exactly `peak_db` dBFS: a float render whose transients overshoot. [T] float32."""
    x = clean(-6.0, seconds).astype(np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.choice(x.size, int(round(share * x.size)), replace=False)
    peak = 10 ** (peak_db / 20)
    x[idx] = np.where(rng.random(idx.size) < 0.5, -1.0, 1.0) * rng.uniform(1.05, peak, idx.size)
    x[idx[0]] = peak
    return x.astype(np.float32)
