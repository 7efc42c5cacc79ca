"""`history.lr_schedule`: a logged learning-rate schedule that no recipe follows.

- `stuck_zero`: the rate is exactly 0 over a stretch that starts within the first 10 % of the points
  and covers at least a quarter of them (`warning`; `error` from 90 %): a warm-up that starts at 0
  leaves a point or two there, never a quarter of the run. A rate that reaches 0 and stays there for
  the last quarter (at least 5 points) is the same fault at the other end (a decay whose total steps
  is shorter than the run): `warning`. A linear decay touches 0 on its last point only.
- `stuck_peak` (warning): only when the configuration the run saved names a decaying scheduler
  (cosine, linear, polynomial, exponential, step...): the rate stays within 1 % of its peak over the
  last half of the points, at least 5, to the end. Without that, a constant rate is a recipe: silent.
- `restarted_on_resume` (warning): at a resume point the rate jumps by more than 1.5x and by more than
  4x the largest move between points before it, and the 3 values after it replay (within 10 %) what the
  run logged that many steps after its own start: the schedule began again. Where the steps went back
  (a checkpoint reloaded), the rate is compared with what the run logged at that same step before.
  The rate logged at the resume step may still be the old schedule's: the resume point and the next
  two are looked at. A rate back to exactly 0 counts when the run's own schedule started near 0.
  A step decay that falls on a long pause (an evaluation) jumps to a value the start never had: silent.
- `warmup_restarted` (warning): mid-run, the rate falls to at most 30 % of its peak so far and then
  climbs for at least 3 points back above half of that peak, without a resume point (a cyclic
  schedule whose configuration names restarts or cycles is left alone).
- `differs_from_config` (warning): the configuration names a learning rate, and the logged peak
  differs from it by more than 1.5x either way; a peak below it only once the rate has stopped
  climbing (a run that died in its warm-up never reached it).
- `no_warmup` (info): the configuration names warm-up steps but the first logged rate is already at
  its peak. Many fine-tuning recipes use none, so never more than info.
"""

from __future__ import annotations

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import fmt_step, resume_points, resume_steps

__all__ = ["judge_lr_schedule", "configured_lr", "decaying_scheduler"]

CHECK = "checks.history.schedule"
_CONFIG_LR = ("learning_rate", "lr", "optim.lr", "base_lr", "peak_lr")
_CYCLIC = ("restart", "cycl", "sgdr", "one_cycle")
_DECAYING = ("cosine", "linear", "poly", "exponential", "exp_decay", "step", "inverse_sqrt", "inv_sqrt", "onecycle")
_NOT_DECAYING = ("constant", "plateau", "stable", "wsd", "none")
_WARMUP = ("warmup_steps", "num_warmup_steps", "warmup", "warmup_ratio")


def configured_lr(run: RunHistory) -> float | None:
    for key in _CONFIG_LR:
        v = run.config.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def _scheduler_names(run: RunHistory) -> str:
    return " ".join(str(v) for k, v in run.config.items() if "sched" in str(k).lower() and isinstance(v, str)).lower()


def decaying_scheduler(run: RunHistory) -> str | None:
    """The configured scheduler's name when it decays over the run (None: none named, or a constant one)."""
    names = _scheduler_names(run)
    if not names or any(c in names for c in _NOT_DECAYING) or any(c in names for c in _CYCLIC):
        return None
    return names if any(d in names for d in _DECAYING) else None


def _cyclic(run: RunHistory) -> bool:
    text = " ".join(f"{k}={v}" for k, v in run.config.items() if isinstance(v, str) or "sched" in str(k)).lower()
    return any(c in text for c in _CYCLIC)


def _finding(severity: str, name: str, message: str, hint: str, step: int, kind: str, **ev) -> Finding:
    return make("history.lr_schedule", severity, name, message, CHECK, hint, step=int(step), kind=kind, **ev)


def _stuck_zero(run: RunHistory, name: str, steps: np.ndarray, lr: np.ndarray) -> list[Finding]:
    n = len(lr)
    zero = lr == 0
    # the zero stretch that begins near the start
    start = int(np.argmax(zero)) if zero.any() else n
    if start <= n // 10:
        nz = np.nonzero(~zero[start:])[0]
        length = int(nz[0]) if len(nz) else n - start
        share = float(zero[n // 10 :].mean()) if n - n // 10 else 0.0
        if length >= max(3, n // 4) or share >= 0.9:
            heavy = share >= 0.9
            return [
                _finding(
                    "error" if heavy else "warning",
                    name,
                    f"the learning rate is exactly 0 on {length} logged points from {fmt_step(run, int(steps[start]))} "
                    f"({length / n:.0%} of the run"
                    + (f", {share:.0%} of it after the first 10 %" if heavy else "")
                    + "): the optimizer changes nothing there",
                    "check the scheduler: a warm-up longer than the run or starting at a multiplier of 0 for "
                    "many steps, a decay whose total steps is 0, or a rate multiplied by a factor that is 0",
                    steps[start],
                    "stuck_zero",
                    points=length,
                )
            ]
    # the zero stretch that ends the run
    nz = np.nonzero(~zero)[0]
    if len(nz) and n - 1 - nz[-1] >= max(5, n // 4):
        first = int(nz[-1]) + 1
        return [
            _finding(
                "warning",
                name,
                f"the learning rate reaches 0 at {fmt_step(run, int(steps[first]))} and stays 0 for the last "
                f"{n - first} logged points ({(n - first) / n:.0%} of the run): those steps train nothing",
                "the decay's total steps is shorter than the run (num_training_steps or T_max from another "
                "dataset size, epochs or accumulation); set it to the run's real number of optimizer steps",
                steps[first],
                "stuck_zero",
                points=n - first,
            )
        ]
    return []


def _stuck_peak(run: RunHistory, name: str, steps: np.ndarray, lr: np.ndarray) -> list[Finding]:
    sched = decaying_scheduler(run)
    n = len(lr)
    peak = float(np.max(lr)) if n else 0.0
    if sched is None or n < 10 or peak <= 0:
        return []
    at_peak = lr >= 0.99 * peak
    notp = np.nonzero(~at_peak)[0]
    first = int(notp[-1]) + 1 if len(notp) else 0
    if first >= n or n - first < max(5, n // 2):
        return []
    return [
        _finding(
            "warning",
            name,
            f"the configuration names a decaying scheduler ({sched!r}) but the learning rate stays at its peak "
            f"{peak:.3g} from {fmt_step(run, int(steps[first]))} to the end ({n - first} of {n} logged points)",
            "the scheduler is not stepped (scheduler.step() missing, or called on another object), or its total "
            "steps is far larger than the run; a run meant to go on much longer decays later",
            steps[first],
            "stuck_peak",
            peak=peak,
            scheduler=sched,
        )
    ]


def _position(steps: np.ndarray, step: int) -> int:
    """Where a resume at `step` (read off another series) falls in this one: the last point that reaches
    `step` from below or by going back (a resumed run logs some steps twice)."""
    prev = np.concatenate([[np.iinfo(np.int64).min], steps[:-1]])
    hits = np.nonzero((steps >= step) & ((prev < step) | (prev >= steps)))[0]
    if not len(hits):
        return len(steps)
    closest = hits[steps[hits] == steps[hits].min()]
    return int(closest[-1])


def _replays(steps: np.ndarray, lr: np.ndarray, r: int) -> bool:
    """Whether the rate from position r on follows the run's own schedule from its start again: its values
    at the steps since the resume match (within 10 %) what the run logged at those steps from step 0."""
    first_end = r if np.all(np.diff(steps[:r]) > 0) else int(np.argmax(np.diff(steps[:r]) <= 0)) + 1
    xs, ys = steps[:first_end].astype(float), lr[:first_end]
    since = (steps[r : r + 3] - steps[r - 1]).astype(float)
    if len(xs) < 2 or not len(since) or since[0] <= 0:
        return False
    want = np.interp(since, xs, ys)
    got = lr[r : r + 3]
    return bool(np.all(want > 0) and np.all(got > 0) and np.all(np.abs(np.log(got / want)) < np.log(1.1)))


def _restarted(
    run: RunHistory, name, s_steps: np.ndarray, steps: np.ndarray, lr: np.ndarray
) -> tuple[list[Finding], list[int]]:
    resumes = set(resume_points(run, run.series[name])) if len(s_steps) == len(lr) else set()
    # the rate's own series rarely has a clock: the restarts are read off the loss's
    resumes |= {_position(steps, st) for st in resume_steps(run)}
    resumes = sorted(r for r in resumes if 2 <= r < len(lr))
    peak = float(np.max(lr)) if len(lr) else 0.0
    for r0 in resumes:
        # the rate logged at the resume step may still be the old schedule's (logged before the fresh
        # scheduler's first step): the restart shows on that point or one of the next two
        for r in range(r0, min(r0 + 3, len(lr))):
            after = float(lr[r])
            earlier = np.nonzero(steps[:r] == steps[r])[0]
            went_back = bool(steps[r] <= steps[r - 1])
            if went_back and len(earlier):
                before = float(lr[earlier[-1]])  # what the schedule gave at this very step the first time
                moves = np.array([0.0])
            else:
                before = float(lr[r - 1])
                moves = np.abs(np.diff(np.log(np.maximum(lr[max(0, r - 10) : r], 1e-30))))
            if before <= 0:
                continue
            if after <= 0:
                # back to exactly 0: a warm-up from 0 again, when the run's own schedule started at ~0
                jump, replays = np.inf, bool(lr[0] <= 0.01 * peak)
            else:
                jump = abs(np.log(after / before))
                # a restarted scheduler replays its schedule from step 0: a step decay that happens to fall on
                # a long pause (an evaluation at an epoch's end) jumps too, but to a value the start never had
                replays = bool(went_back and len(earlier)) or _replays(steps, lr, r)
            if replays and jump > max(np.log(1.5), 4 * float(np.max(moves)) if len(moves) else 0.0):
                what = "at the same step before the restart" if went_back and len(earlier) else "a point before"
                ratio = f"{after / before:.3g}x"
                return [
                    _finding(
                        "warning",
                        name,
                        f"at the resume at {fmt_step(run, int(steps[r]))} the learning rate is {after:.3g}, against "
                        f"{before:.3g} {what} ({ratio}): the scheduler was built afresh instead of restored",
                        "restore the scheduler's state with the optimizer's (HF: resume_from_checkpoint restores "
                        "scheduler.pt; a plain loop: save and load scheduler.state_dict()), or step it to the "
                        "resumed step",
                        steps[r],
                        "restarted_on_resume",
                        before=before,
                        after=after,
                    )
                ], resumes
    return [], resumes


def _warmup_again(run: RunHistory, name: str, steps: np.ndarray, lr: np.ndarray) -> list[Finding]:
    n = len(lr)
    peak, low_at = lr[0], None
    for i in range(1, n):
        if low_at is None and i > n // 20 and peak > 0 and lr[i] <= 0.3 * peak and lr[i] < lr[i - 1]:
            low_at = i
        elif low_at is not None:
            climb = lr[low_at : i + 1]
            if len(climb) >= 4 and np.all(np.diff(climb) > 0) and lr[i] >= 0.5 * peak:
                return [
                    _finding(
                        "warning",
                        name,
                        f"the learning rate falls to {lr[low_at]:.3g} at {fmt_step(run, int(steps[low_at]))} "
                        f"(≤ 30 % of its peak {peak:.3g}) and ramps up again to {lr[i]:.3g} by "
                        f"{fmt_step(run, int(steps[i]))}: a warm-up run again mid-training",
                        "a scheduler stepped twice (per batch and per epoch), built inside the epoch loop, or one "
                        "whose total steps is smaller than the run; step it once per optimizer step",
                        steps[low_at],
                        "warmup_restarted",
                    )
                ]
            if len(climb) >= 2 and climb[-1] <= climb[-2]:
                low_at = i if lr[i] <= 0.3 * peak else None
        peak = max(peak, lr[i])
    return []


def _versus_config(run: RunHistory, name: str, steps: np.ndarray, lr: np.ndarray) -> list[Finding]:
    out = []
    want = configured_lr(run)
    n = len(lr)
    top = float(np.max(lr)) if n else 0.0
    top_at = int(np.argmax(lr)) if n else 0
    # a rate still climbing at the last point has not reached its peak yet: "below" would be a guess
    still_climbing = top_at >= n - 2 and n >= 2 and lr[-1] > lr[0]
    if want is not None and top > 0 and (top / want > 1.5 or (top / want < 1 / 1.5 and not still_climbing)):
        out.append(
            _finding(
                "warning",
                name,
                f"the logged learning rate peaks at {top:.3g} but the run's configuration says {want:.3g} "
                f"({top / want:.3g}x)",
                "the optimizer was built with another rate than the one configured (a hard-coded value, a rate "
                "scaled by the batch size or the number of devices, a param group with its own lr)",
                steps[top_at],
                "differs_from_config",
                logged_peak=top,
                configured=want,
            )
        )
    warm = next((run.config[k] for k in _WARMUP if isinstance(run.config.get(k), (int, float))), None)
    if warm and warm > 0 and n >= 3 and top > 0 and lr[0] >= 0.9 * top and int(steps[0]) < 0.5 * warm:
        out.append(
            _finding(
                "info",
                name,
                f"the configuration names a warm-up ({warm:g}) but the first logged rate ({lr[0]:.3g} at "
                f"{fmt_step(run, int(steps[0]))}) is already at its peak",
                "if a warm-up was meant, check that the scheduler with warm-up is the one the optimizer steps",
                steps[0],
                "no_warmup",
            )
        )
    return out


def judge_lr_schedule(run: RunHistory) -> list[Finding]:
    s = run.first("lr")
    if s is None or len(s) < 5:
        return []
    ok = np.isfinite(s.values)
    steps, lr = s.steps[ok], s.values[ok]
    if len(lr) < 5:
        return []
    zero = _stuck_zero(run, s.name, steps, lr)
    if zero and zero[0].severity.value == "error":
        return zero
    out = list(zero)
    restarted, resumes = _restarted(run, s.name, s.steps, steps, lr)
    out += restarted
    if not resumes and not _cyclic(run):
        out += _warmup_again(run, s.name, steps, lr)
    if not resumes:
        out += _stuck_peak(run, s.name, steps, lr)
    out += _versus_config(run, s.name, steps, lr)
    return out
