"""`history.throughput_drop` and `history.resume_jump`: the run's clock and its restarts.

- `throughput_drop` (warning): the seconds per step (a `step_time` series, the inverse of a
  `throughput` one, or the wall-clock spacing of the training-loss points) have a median over the
  first quarter; from some point on, both the median of the next 5 % and the median of everything
  after are above 1.8x it. A slow interval (an evaluation, a checkpoint) moves neither median.
- `resume_jump` (warning): at a resume point (steps going back, or a stopped clock far beyond the
  logging interval) the training loss after it differs from before it by more than 5x its noise and
  10 %: the resumed run did not continue the one that stopped (optimizer moments, the scheduler or
  the data position were not restored, or another checkpoint was loaded).
"""

from __future__ import annotations

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import finite_points, fmt_step, log_noise, resume_points, window

__all__ = ["judge_throughput", "judge_resume"]

CHECK = "checks.history.timing"


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
    if len(sec) > 2000:  # a long log: judge the medians of 2000 bins (a drop that stays spans many of them)
        b = len(sec) // 2000
        m = b * 2000
        sec = np.median(sec[:m].reshape(2000, b), axis=1)
        steps = steps[:m:b]
    n = len(sec)
    if n < 12:
        return []
    base = float(np.median(sec[: n // 4]))
    w = max(3, n // 20)
    if base <= 0:
        return []
    ahead = np.median(np.lib.stride_tricks.sliding_window_view(sec, w), axis=1)  # median of sec[i : i + w]
    checked, last = 0, -n
    for i in np.nonzero(ahead[n // 4 :] > 1.8 * base)[0] + n // 4:
        if i - last < max(1, n // 200) or checked >= 200:  # a suffix median is O(n): check a few hundred places
            continue
        checked, last = checked + 1, i
        if np.median(sec[i:]) > 1.8 * base:
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


def judge_resume(run: RunHistory) -> list[Finding]:
    s = run.first("train_loss")
    if s is None or len(s) < 10:
        return []
    idx, steps, vals = finite_points(s)
    if len(vals) < 10 or (vals <= 0).any():
        return []
    noise = log_noise(vals)
    w = window(len(vals))
    for r in resume_points(run, s):
        pos = int(np.searchsorted(idx, r))
        if pos < 3 or pos > len(vals) - 3:
            continue
        before = float(np.median(vals[max(0, pos - w) : pos]))
        after = float(np.median(vals[pos : pos + min(w, 5)]))
        change = abs(np.log(after / before))
        if change > max(5 * noise, np.log(1.1)):
            step = int(steps[pos])
            went_back = bool(pos > 0 and steps[pos] <= steps[pos - 1])
            return [
                make(
                    "history.resume_jump",
                    "warning",
                    s.name,
                    f"at the resume at {fmt_step(run, step)} the training loss goes from {before:.4g} to {after:.4g} "
                    f"({after / before:.3g}x)" + (" and the steps go back" if went_back else ""),
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
