"""`history.loss_spike` and `history.grad_explosion`: sudden departures from a curve's own recent level.

A loss spike is a point whose log-loss stands above the median of the points before it by more than
`SPIKE_SIGMAS` times the curve's own point-to-point noise (1.4826 x MAD of its log differences), by
more than `SPIKE_TAIL` times the 90th percentile of its own residuals (heavy-tailed noise has large
ordinary excursions), by more than 3x its 5th (or 2 %-th) largest excursion, and by at least
`SPIKE_RATIO` (a 1.5x jump: noise alone on a long, smooth curve can be many sigmas of a tiny noise).
It *recovered* when, within the next `window` points, or at the end of the log (the median of its
last quarter after the spike), the loss is back within `SPIKE_RATIO` of its level before; a spike
that never comes back is an `error` (the run lost what it had learned), one that recovers a
`warning`, one the log ends on a `warning` (unknown). On a curve of fewer than `FEW_POINTS` points its
noise is a guess: a recovered spike is `info`, an unrecovered one a `warning`. Only the first spike is
reported, with the count of the others.

A gradient explosion is sustained: at least `EXPLODE_POINTS` consecutive finite gradient norms above
`EXPLODE_RATIO` (100x) times the median of the norms before them (taken at 200 prefix boundaries). One
large norm is what clipping is for and is not reported.
"""

from __future__ import annotations

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import finite_points, fmt_step, log_noise, prefix_medians, rolling_median_before, window

__all__ = [
    "judge_spikes",
    "judge_grad_explosion",
    "spike_threshold",
    "SPIKE_SIGMAS",
    "SPIKE_TAIL",
    "SPIKE_RATIO",
    "EXPLODE_RATIO",
    "EXPLODE_POINTS",
]

CHECK = "checks.history.spikes"
SPIKE_SIGMAS = 10.0
SPIKE_RATIO = 1.5
SPIKE_TAIL = 6.0
FEW_POINTS = 30
EXPLODE_RATIO = 100.0
EXPLODE_POINTS = 3


def _residuals(logs: np.ndarray, w: int) -> np.ndarray:
    """log-value minus the median of the `w` points before it (NaN for the first `w`)."""
    return logs - rolling_median_before(logs, w)


def _excursion_peaks(r: np.ndarray) -> np.ndarray:
    """The highest residual of each run of consecutive positive residuals."""
    pos = r > 0
    if not pos.any():
        return np.zeros(0)
    starts = np.nonzero(pos & ~np.concatenate([[False], pos[:-1]]))[0]
    ends = np.nonzero(pos & ~np.concatenate([pos[1:], [False]]))[0]
    return np.array([float(np.max(r[a : b + 1])) for a, b in zip(starts, ends)])


def spike_threshold(values: np.ndarray, w: int) -> float:
    """How far (in log) above its recent median a point must stand to be a spike on this curve: 10x the
    curve's point-to-point noise, 6x the 90th percentile of its own residuals (a curve with heavy-tailed
    noise has large ordinary excursions), and never under a 1.5x jump."""
    r = _residuals(np.log(values), w)
    r = r[np.isfinite(r)]
    tail = float(np.quantile(r, 0.9)) if len(r) >= 10 else 0.0
    # and 3x its K-th largest excursion (K = 5, or 2 % of the points; a run of points above the median
    # is one excursion, so a level shift counts once): a spike stands out of the curve's own largest
    # excursions, so a handful of spikes still count, and a curve full of them is its noise
    peaks = _excursion_peaks(r)
    k = max(5, len(r) // 50)
    kth = float(np.sort(peaks)[-k]) if len(peaks) >= k else 0.0
    return max(SPIKE_SIGMAS * log_noise(values), SPIKE_TAIL * max(tail, 0.0), 3.0 * max(kth, 0.0), np.log(SPIKE_RATIO))


def _spikes(values: np.ndarray, w: int) -> list[tuple[int, float, float]]:
    """(position, value, level before) of each spike, positions in `values`."""
    out = []
    logs = np.log(values)
    r = _residuals(logs, w)
    jump = spike_threshold(values, w)
    i = w
    while i < len(values):
        if r[i] > jump:
            out.append((i, float(values[i]), float(np.exp(logs[i] - r[i]))))
            i += w  # one spike, not each of its points
        else:
            i += 1
    return out


def judge_spikes(run: RunHistory) -> list[Finding]:
    s = run.first("train_loss")
    if s is None:
        return []
    _, steps, vals = finite_points(s)
    if len(vals) < 10 or (vals <= 0).any():
        return []
    w = window(len(vals))
    found = _spikes(vals, w)
    if not found:
        return []
    i, value, before = found[0]
    rest = vals[i + 1 :]
    after = rest[:w]
    settled = float(np.median(rest)) if len(rest) else value
    # back within a window, or by the end: the level the log ends at (the median of the last quarter of
    # what follows, at least a window) is the level before the spike; one low point proves nothing
    end_level = float(np.median(rest[-max(w, len(rest) // 4) :])) if len(rest) else value
    recovered = (len(after) > 0 and float(np.min(after)) <= before * SPIKE_RATIO) or (
        len(rest) >= 3 and end_level <= before * SPIKE_RATIO
    )
    back = np.nonzero(rest <= before * SPIKE_RATIO)[0]
    step = int(steps[i])
    more = f"; {len(found) - 1} more spike(s) later" if len(found) > 1 else ""
    few = len(vals) < FEW_POINTS  # the curve's own noise is a guess on so few points: context, not a verdict
    if recovered:
        took = int(back[0]) + 1 if len(back) else len(rest)
        return [
            make(
                "history.loss_spike",
                "info" if few else "warning",
                s.name,
                f"the training loss spikes to {value:.4g} at {fmt_step(run, step)} ({value / before:.2f}x its level "
                f"{before:.4g} over the {w} points before) and recovers (first back within {SPIKE_RATIO:g}x "
                f"of it {took} point(s) later; its median afterwards {settled:.4g}){more}",
                CHECK,
                "a recovered spike is one bad batch or a too-large step: look at that step's batch (a clip of "
                "noise, a caption of a different language, an empty target) and at the gradient norm there; "
                "clipping and a lower peak learning rate make them rarer",
                step=step,
                recovered=True,
                points_to_recover=took,
                value=value,
                level_before=before,
                spikes=len(found),
            )
        ]
    short = len(rest) < 3  # the log ends on the spike: whether it would have come back is unknown
    return [
        make(
            "history.loss_spike",
            "warning" if short or few else "error",
            s.name,
            f"the training loss jumps to {value:.4g} at {fmt_step(run, step)} ({value / before:.2f}x its level "
            f"{before:.4g}) and "
            + (
                f"the log ends {len(rest)} point(s) later"
                if short
                else f"does not come back: its median over the {len(rest)} points after is {settled:.4g}"
            )
            + more,
            CHECK,
            "the run lost what it had learned at that step: bisect the checkpoints around it, and look at the "
            "learning rate and gradient norm there (a schedule jump, a resume that reset the optimizer)",
            step=step,
            recovered=False,
            value=value,
            level_before=before,
            level_after=settled,
            spikes=len(found),
        )
    ]


def judge_grad_explosion(run: RunHistory) -> list[Finding]:
    s = run.first("grad_norm")
    if s is None:
        return []
    _, steps, vals = finite_points(s)
    vals = np.abs(vals)
    if len(vals) < 10:
        return []
    w = window(len(vals))
    n = len(vals)
    # the median of all the norms before each point, taken at 200 prefix boundaries (it lags by at most
    # 0.5 % of the run, nothing next to "100x"): linear in the log's length
    base = prefix_medians(vals)
    over = (base > 0) & (vals > EXPLODE_RATIO * base) & (np.arange(n) >= w)
    # the first run of EXPLODE_POINTS consecutive points over it
    runs = np.convolve(over.astype(int), np.ones(EXPLODE_POINTS, dtype=int), mode="valid") == EXPLODE_POINTS
    hits = np.nonzero(runs)[0]
    if len(hits):
        start = int(hits[0])
        end = start + int(np.argmin(over[start:])) if not over[start:].all() else n  # where the run stops
        i = end - 1
        step = int(steps[start])
        ref = float(base[start])
        return [
            make(
                "history.grad_explosion",
                "warning",
                s.name,
                f"the gradient norm explodes from {fmt_step(run, step)}: {end - start} consecutive logged norms "
                f"above {EXPLODE_RATIO:g}x its earlier median {ref:.3g} (reaching "
                f"{float(np.max(vals[start:end])):.3g})",
                CHECK,
                "clip the gradient norm (e.g. max_grad_norm=1.0), lower the peak learning rate or lengthen its "
                "warm-up, and check for fp16 overflow; bisect the checkpoints to the first one whose update is "
                "out of line",
                step=step,
                ratio=float(vals[i] / ref),
                median_before=ref,
                points=end - start,
            )
        ]
    return []
