"""Curve arithmetic the history judges share: finite points, noise, robust levels, resume points.

Every threshold is relative to the run in front of the judge: its own noise (the spread of its
step-to-step changes, robust to spikes), its own level, its own logging interval. Nothing is a
constant measured on another run.
"""

from __future__ import annotations

import numpy as np

from ...records.history import RunHistory, Series

__all__ = [
    "finite_points",
    "log_noise",
    "running_median",
    "window",
    "level",
    "resume_points",
    "resume_steps",
    "at_or_after",
    "rolling_median_before",
    "prefix_medians",
    "fmt_step",
]


def finite_points(s: Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log positions, steps, values) of the finite points, in log order."""
    ok = np.isfinite(s.values)
    idx = np.nonzero(ok)[0]
    return idx, s.steps[ok], s.values[ok]


def log_noise(values: np.ndarray) -> float:
    """The point-to-point noise of log(values) (values > 0): 1.4826 x MAD of the differences / sqrt 2,
    so one spike does not widen it. 0 for fewer than 3 points."""
    v = values[values > 0]
    if len(v) < 3:
        return 0.0
    d = np.diff(np.log(v))
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2.0))


def running_median(values: np.ndarray, w: int) -> np.ndarray:
    """The median of the w points centred on each point (fewer at the ends), in chunks: linear memory."""
    n = len(values)
    h = w // 2
    if n <= 2 * h + 1:
        return np.array([np.median(values[max(0, i - h) : i + h + 1]) for i in range(n)])
    out = np.empty(n)
    for i in range(h):  # the ends, with the points there are
        out[i] = np.median(values[: i + h + 1])
        out[n - 1 - i] = np.median(values[n - 1 - i - h :])
    win = np.lib.stride_tricks.sliding_window_view(values, 2 * h + 1)
    for a in range(0, len(win), 100_000):  # np.median copies its input
        out[h + a : h + a + min(100_000, len(win) - a)] = np.median(win[a : a + 100_000], axis=1)
    return out


def window(n: int) -> int:
    """A smoothing window for a curve of n points: 5 % of it, between 3 and 50 points."""
    return int(min(50, max(3, n // 20)))


def level(values: np.ndarray) -> float:
    """A robust level of a stretch of a curve (its median)."""
    return float(np.median(values)) if len(values) else float("nan")


def resume_points(run: RunHistory, s: Series) -> list[int]:
    """Log positions where the run was evidently restarted: the step goes back (a resumed run logging
    steps it had logged), or the wall clock stops for far longer than the run's own logging interval
    (at least 20x its median interval and 60 s) while the steps go on."""
    out = set(int(i) + 1 for i in np.nonzero(np.diff(s.steps) < 0)[0])
    if s.wall is not None and len(s) > 5:
        gaps = np.diff(s.wall)
        ok = np.isfinite(gaps) & (gaps > 0)
        if ok.sum() > 3:
            typical = float(np.median(gaps[ok]))
            for i in np.nonzero(ok & (gaps > max(60.0, 20.0 * typical)))[0]:
                out.add(int(i) + 1)
    return sorted(out)


def rolling_median_before(x: np.ndarray, w: int) -> np.ndarray:
    """m[i] = median(x[i - w : i]) for i >= w (NaN before): one vectorised pass, linear in len(x)."""
    out = np.full(len(x), np.nan)
    if len(x) > w:
        win = np.lib.stride_tricks.sliding_window_view(x, w)[:-1]
        for a in range(0, len(win), 100_000):  # in chunks: np.median copies its input (w x 8 bytes a point)
            out[w + a : w + a + len(win[a : a + 100_000])] = np.median(win[a : a + 100_000], axis=1)
    return out


def prefix_medians(x: np.ndarray, blocks: int = 200) -> np.ndarray:
    """p[i] ~ median(x[:i]): the exact median of the prefix up to the last of `blocks` evenly spaced
    boundaries at or before i (the first boundary's for i before it). A long log's earlier median moves
    slowly, and this keeps the judge linear (a median per point would be quadratic: hours at 10^6)."""
    n = len(x)
    if n == 0:
        return np.zeros(0)
    bounds = np.unique(np.linspace(1, n, min(blocks, n)).astype(int))
    meds = np.array([np.median(x[:b]) for b in bounds])
    idx = np.clip(np.searchsorted(bounds, np.arange(n), side="right") - 1, 0, len(bounds) - 1)
    return meds[idx]


def resume_steps(run: RunHistory) -> list[int]:
    """The steps at which the run was restarted, read off its training loss (the series most likely
    to carry the clock), else any series with wall times."""
    s = run.first("train_loss")
    if s is None or s.wall is None:
        s = next((x for x in run.series.values() if x.wall is not None), s)
    return [] if s is None else [int(s.steps[i]) for i in resume_points(run, s)]


def at_or_after(s: Series, step: int) -> int:
    """The first log position whose step is >= step (len(s) when none)."""
    hits = np.nonzero(s.steps >= step)[0]
    return int(hits[0]) if len(hits) else len(s)


def fmt_step(run: RunHistory, step: int) -> str:
    return f"{run.axis} {step}"
