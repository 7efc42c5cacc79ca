"""`history.throughput_drop` and `history.resume_jump`: the run's clock and its restarts.

- `throughput_drop` (warning): the seconds per step (a `step_time` series, the inverse of a
  `throughput` one, or the wall-clock spacing of the training-loss points) have a median over the
  first quarter; from some point on, both the median of the next 5 % and the median of everything
  after are above 1.8x it. A slow interval (an evaluation, a checkpoint) moves neither median.
- `resume_jump` (warning): at a resume point (steps going back, or a stopped clock far beyond the
  logging interval) the level of the training loss over the k points after it (k = 2..5) differs from
  the k before it by more than 10 %, by more than 6 robust spreads of the same shift measured at every
  other point (so a steep early descent or sparse logging is not a jump), and by 5x the noise of a
  k-point median. Where the steps went back, "before" is the level the run had at those same steps the
  first time (a correct resume replays it), not its level when it stopped: the resumed run did not continue the one that stopped (optimizer moments, the scheduler or
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
    n = len(sec)
    if n < 12:
        return []
    base = float(np.median(sec[: n // 4]))
    w = max(3, n // 20)
    if base <= 0:
        return []
    for i in range(n // 4, n - w + 1):
        if np.median(sec[i : i + w]) > 1.8 * base and np.median(sec[i:]) > 1.8 * base:
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


def _shift(logs: np.ndarray, pos: int, k: int) -> float:
    """The change of level across `pos`: median of the k log-values from it minus the k before it."""
    return float(np.median(logs[pos : pos + k]) - np.median(logs[pos - k : pos]))


def judge_resume(run: RunHistory) -> list[Finding]:
    s = run.first("train_loss")
    if s is None or len(s) < 10:
        return []
    idx, steps, vals = finite_points(s)
    if len(vals) < 10 or (vals <= 0).any():
        return []
    logs = np.log(vals)
    k = max(2, min(5, window(len(vals)) // 2))
    resumes = [int(np.searchsorted(idx, r)) for r in resume_points(run, s)]
    resumes = [p for p in resumes if k <= p <= len(vals) - k]
    if not resumes:
        return []
    # the same shift measured everywhere else: the curve's own trend and noise over 2k points
    away = [p for p in range(k, len(vals) - k + 1) if all(abs(p - r) > k for r in resumes)]
    if len(away) < 5:
        return []
    ordinary = np.array([_shift(logs, p, k) for p in away])
    centre = float(np.median(ordinary))
    spread = 1.4826 * float(np.median(np.abs(ordinary - centre)))
    for pos in resumes:
        went_back = bool(steps[pos] <= steps[pos - 1])
        if went_back:
            # a checkpoint reloaded: the run should replay the level it had at those steps the first time
            first = np.nonzero(steps[:pos] >= steps[pos])[0][:k]
            if len(first) < 2:
                continue
            before = float(np.exp(np.median(logs[first])))
            change = float(np.median(logs[pos : pos + k]) - np.median(logs[first]))
            excess = abs(change) - 6 * spread
        else:
            before = float(np.exp(np.median(logs[pos - k : pos])))
            change = _shift(logs, pos, k)
            excess = abs(change - centre) - 6 * spread
        after = float(np.exp(np.median(logs[pos : pos + k])))
        if excess > 0 and abs(change) > np.log(1.1) and abs(change) > 5 * log_noise(vals) / np.sqrt(k):
            step = int(steps[pos])
            return [
                make(
                    "history.resume_jump",
                    "warning",
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
