"""`history.throughput_drop` and `history.resume_jump`: the run's clock and its restarts.

- `throughput_drop` (warning): the seconds per step (a `step_time` series, the inverse of a
  `throughput` one, or the wall-clock spacing of the training-loss points) have a median over the
  first quarter; from some point on (with at least 5 intervals and a tenth of the run after it), the
  median of the next 5 % and the median of everything after are above 1.8x it, and 80 % of the
  intervals after are above 1.5x it. Slow intervals (an evaluation, a checkpoint) move none of these.
  Past 2000 intervals, the medians of blocks of consecutive intervals are scanned instead.
- `resume_jump` (warning): at a resume point (steps going back, or a stopped clock far beyond the
  logging interval) the loss's level after it departs from the level expected there by more than
  10 % and 4 standard errors (from the curve's own point noise). Where the steps went back (a
  checkpoint reloaded), the expected level is what the run logged at those same steps the first time
  (a correct resume replays it): the median of the first 5 step-for-step differences. Where the clock
  stopped, it is a line through the 3-10 points before, read at the resume step, against the median
  of the 5 points from it; where that line itself moves by half the jump (the curve's first steep
  fall), a line cannot tell a jump from the bend: silent. The resumed run did not continue the one
  that stopped (optimizer moments, the scheduler or the data position were not restored, or another
  checkpoint was loaded). With fewer than 5 points on a side it is `info`.
"""

from __future__ import annotations

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import finite_points, fmt_step, log_noise, resume_points, window

__all__ = ["judge_throughput", "judge_resume"]

CHECK = "checks.history.timing"
_MAX_POINTS = 2000  # intervals scanned one by one; a longer log is scanned by the medians of blocks


def _seconds_per_step(run: RunHistory) -> tuple[np.ndarray, np.ndarray, str] | None:
    s = run.first("step_time")
    if s is not None and len(s) >= 12:
        _, st, v = finite_points(s)
        return st, v, s.name
    s = run.first("throughput")
    if s is not None and len(s) >= 12:
        _, st, v = finite_points(s)
        keep = v > 0
        return st[keep], 1.0 / v[keep], s.name
    s = run.first("train_loss")
    if s is not None and s.wall is not None and len(s) >= 12:
        ok = np.isfinite(s.wall)
        st, wall = s.steps[ok], s.wall[ok]
        ds, dw = np.diff(st), np.diff(wall)
        keep = ds > 0
        return st[1:][keep], dw[keep] / ds[keep], f"{s.name} (wall clock)"
    return None


def judge_throughput(run: RunHistory) -> list[Finding]:
    got = _seconds_per_step(run)
    if got is None:
        return []
    steps, sec, name = got
    if len(sec) > _MAX_POINTS:
        # a long log: the medians of blocks of consecutive intervals (a slow interval moves a block's
        # median no more than it moved the run's), so the scan stays linear; the step is a block's first
        block = -(-len(sec) // _MAX_POINTS)
        cut = len(sec) // block * block
        sec = np.median(sec[:cut].reshape(-1, block), axis=1)
        steps = steps[:cut:block]
    n = len(sec)
    if n < 12:
        return []
    base = float(np.median(sec[: n // 4]))
    w = max(3, n // 20)
    if base <= 0:
        return []
    last = n - max(5, n // 10, w)  # "stays": at least 5 intervals (and a tenth of the run) after it
    for i in range(n // 4, last + 1):
        after = sec[i:]
        if (
            np.median(sec[i : i + w]) > 1.8 * base
            and np.median(after) > 1.8 * base
            and np.mean(after > 1.5 * base) >= 0.8  # slow nearly everywhere after, not a few long pauses
        ):
            i += int(np.argmax(sec[i : i + w] > 1.8 * base))  # the first slow step of that stretch
            after = float(np.median(sec[i:]))
            return [
                make(
                    "history.throughput_drop",
                    "warning",
                    name,
                    f"steps take {after / base:.2f}x longer from {fmt_step(run, int(steps[i]))} on: {after:.3g} s a "
                    f"step against {base:.3g} s over the first quarter of the run, and it stays that way",
                    CHECK,
                    "something started at that step and never stopped: a checkpoint upload or logging call "
                    "that blocks the loop, a loader worker that died (fewer workers serve), memory pressure or "
                    "swapping, thermal throttling, another job on the machine; `signalchain doctor --symptom "
                    "slow` on the pipeline times the loader against the update",
                    step=int(steps[i]),
                    before_s=base,
                    after_s=after,
                )
            ]
    return []


def _level_at(x: np.ndarray, y: np.ndarray, at: float) -> tuple[float, float, float]:
    """A least-squares line through (x, y), read at `at`: (level, how much the line moves across its own
    points, the variance factor of that reading: 1/n + (at - mean x)^2 / sum (x - mean x)^2)."""
    n = len(x)
    if n < 2 or np.ptp(x) == 0:
        return float(np.median(y)), 0.0, 1.0 / max(n, 1)
    xf = x.astype(float)
    slope, icept = np.polyfit(xf, y, 1)
    var = 1.0 / n + (at - xf.mean()) ** 2 / float(np.sum((xf - xf.mean()) ** 2))
    return float(slope * at + icept), float(abs(slope) * np.ptp(xf)), float(var)


def judge_resume(run: RunHistory) -> list[Finding]:
    s = run.first("train_loss")
    if s is None or len(s) < 10:
        return []
    idx, steps, vals = finite_points(s)
    if len(vals) < 10 or (vals <= 0).any():
        return []
    logs = np.log(vals)
    m = max(3, min(10, window(len(vals))))  # points on each side
    sigma = log_noise(vals)
    for r in resume_points(run, s):
        pos = int(np.searchsorted(idx, r))
        if pos < 3 or pos > len(vals) - 3:
            continue
        at = float(steps[pos])
        went_back = bool(steps[pos] <= steps[pos - 1])
        k = min(5, m, len(vals) - pos)
        n_left, n_right = 0, k
        if went_back:
            # a checkpoint reloaded: the replay should give, step for step, the level the run had at those
            # same steps the first time; the median of the first k differences (no trend between them)
            first = {int(st): float(lg) for st, lg in zip(steps[:pos], logs[:pos])}
            pairs = [
                (lg, first[int(st)]) for st, lg in zip(steps[pos : pos + m], logs[pos : pos + m]) if int(st) in first
            ]
            if len(pairs) < 3:
                continue
            diffs = np.array([p[0] - p[1] for p in pairs[:k]])
            change = float(np.median(diffs))
            b = float(np.median([p[1] for p in pairs[:k]]))
            se = sigma * np.sqrt(2.0 * 1.57 / len(diffs))
            bend = 0.0
            n_left = n_right = len(diffs)
        else:
            # the line through the m points before, read at the resume step, against the median of the k
            # points from it (a transient right after the restart is the signal, not a bend to discount)
            left = slice(max(0, pos - m), pos)
            b, moves_l, var_l = _level_at(steps[left], logs[left], at)
            change = float(np.median(logs[pos : pos + k])) - b
            se = sigma * np.sqrt(var_l + 1.57 / k)
            # where the curve bends that much within the m points before (its first steep fall), a line
            # cannot tell a jump from the bend: ambiguous, silent
            bend = 2.0 * moves_l
            n_left = len(logs[left])
        a_ = b + change
        if abs(change) > max(np.log(1.1), 4.0 * se, bend):
            before, after = float(np.exp(b)), float(np.exp(a_))
            step = int(steps[pos])
            few = min(n_left, n_right) < 5  # a handful of points on a side: context only
            return [
                make(
                    "history.resume_jump",
                    "info" if few else "warning",
                    s.name,
                    f"at the resume at {fmt_step(run, step)} the training loss goes from {before:.4g} to {after:.4g} "
                    f"({after / before:.3g}x"
                    + (", against what it was at those steps before the restart)" if went_back else ")")
                    + (" and the steps go back" if went_back else ""),
                    CHECK,
                    "the resumed run did not continue the stopped one: restore the optimizer (its moments), the "
                    "scheduler, the scaler and the data position with the weights, and check which checkpoint "
                    "was loaded; `signalchain bisect --checkpoints` around that step compares their states",
                    step=step,
                    before=before,
                    after=after,
                    steps_went_back=went_back,
                )
            ]
    return []
