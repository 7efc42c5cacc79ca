"""`history.lr_schedule`: a logged learning-rate schedule that no recipe follows.

- `stuck_zero` (error): the rate is exactly 0 on at least 90 % of the points after the first 10 %
  (a warm-up that starts at 0 is normal; a rate that stays there trains nothing).
- `restarted_on_resume` (warning): at a resume point (the steps go back, or the clock stopped far
  longer than the run's logging interval) the rate jumps to more than 2x or less than 0.5x its last
  value before, when the schedule had been moving by less than that between points: a scheduler
  built afresh instead of restored from the checkpoint.
- `warmup_restarted` (warning): mid-run, the rate falls to at most 30 % of its peak so far and then
  climbs for at least 3 points back above half of that peak, without a resume point: a warm-up run
  again (a scheduler stepped per epoch and per step, or rebuilt in the loop). A cyclic schedule jumps
  back up instead of climbing, and one whose configuration names restarts or cycles is left alone.
- `differs_from_config` (warning): the configuration the run saved names a learning rate, and the
  logged peak differs from it by more than 1.5x either way.
A constant rate and a schedule with no warm-up are recipes, not faults: silent.
"""

from __future__ import annotations

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import fmt_step, resume_points, resume_steps

__all__ = ["judge_lr_schedule", "configured_lr"]

CHECK = "checks.history.schedule"
_CONFIG_LR = ("learning_rate", "lr", "optim.lr", "base_lr", "peak_lr")
_CYCLIC = ("restart", "cycl", "sgdr", "one_cycle")


def configured_lr(run: RunHistory) -> float | None:
    for key in _CONFIG_LR:
        v = run.config.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def _cyclic(run: RunHistory) -> bool:
    text = " ".join(f"{k}={v}" for k, v in run.config.items() if isinstance(v, str) or "sched" in str(k)).lower()
    return any(c in text for c in _CYCLIC)


def judge_lr_schedule(run: RunHistory) -> list[Finding]:
    s = run.first("lr")
    if s is None or len(s) < 5:
        return []
    ok = np.isfinite(s.values)
    steps, lr = s.steps[ok], s.values[ok]
    out: list[Finding] = []
    n = len(lr)
    tail = lr[n // 10 :]
    if len(tail) >= 4 and (tail == 0).mean() >= 0.9:
        first = int(steps[n // 10 + int(np.argmax(tail == 0))])
        out.append(
            make(
                "history.lr_schedule",
                "error",
                s.name,
                f"the learning rate is exactly 0 on {(tail == 0).mean():.0%} of the logged points after the first "
                f"10 % (from {fmt_step(run, first)}): the optimizer changes nothing",
                CHECK,
                "check the scheduler: a warm-up of more steps than the run, a decay that reaches 0 at step 0 "
                "(num_training_steps of 0 or a wrong total), or a rate multiplied by a factor that is 0",
                step=first,
                kind="stuck_zero",
            )
        )
        return out
    resumes = resume_points(run, s) if len(s) == len(lr) else []
    # the rate's own series rarely has a clock: the restarts are read off the loss's
    resumes = sorted(set(resumes) | {int(np.searchsorted(steps, st)) for st in resume_steps(run)})
    for r in resumes:
        if r < 2 or r >= n:
            continue
        before, after = lr[r - 1], lr[r]
        moves = np.abs(np.diff(np.log(np.maximum(lr[max(0, r - 10) : r], 1e-30))))
        if (
            before > 0
            and after > 0
            and (after / before > 2 or after / before < 0.5)
            and (len(moves) == 0 or float(np.max(moves)) < np.log(2))
        ):
            out.append(
                make(
                    "history.lr_schedule",
                    "warning",
                    s.name,
                    f"at the resume at {fmt_step(run, int(steps[r]))} the learning rate jumps from {before:.3g} to "
                    f"{after:.3g} ({after / before:.3g}x) while it had moved less than 2x a point before: the "
                    "scheduler was built afresh instead of restored",
                    CHECK,
                    "restore the scheduler's state with the optimizer's (HF: resume_from_checkpoint restores "
                    "scheduler.pt; a plain loop: save and load scheduler.state_dict()), or step it to the resumed "
                    "step",
                    step=int(steps[r]),
                    kind="restarted_on_resume",
                    before=float(before),
                    after=float(after),
                )
            )
            break
    if not _cyclic(run) and not resumes:
        peak = lr[0]
        low_at = None
        for i in range(1, n):
            if low_at is None and i > n // 20 and peak > 0 and lr[i] <= 0.3 * peak and lr[i] < lr[i - 1]:
                low_at = i
            elif low_at is not None:
                climb = lr[low_at : i + 1]
                if len(climb) >= 4 and np.all(np.diff(climb) > 0) and lr[i] >= 0.5 * peak:
                    out.append(
                        make(
                            "history.lr_schedule",
                            "warning",
                            s.name,
                            f"the learning rate falls to {lr[low_at]:.3g} at {fmt_step(run, int(steps[low_at]))} "
                            f"(≤ 30 % of its peak {peak:.3g}) and ramps up again to {lr[i]:.3g} by "
                            f"{fmt_step(run, int(steps[i]))}: a warm-up run again mid-training",
                            CHECK,
                            "a scheduler stepped twice (per batch and per epoch), built inside the epoch loop, "
                            "or one whose total steps is smaller than the run; step it once per optimizer step",
                            step=int(steps[low_at]),
                            kind="warmup_restarted",
                        )
                    )
                    break
                if len(climb) >= 2 and climb[-1] <= climb[-2]:
                    low_at = i if lr[i] <= 0.3 * peak else None
            peak = max(peak, lr[i])
    want = configured_lr(run)
    top = float(np.max(lr)) if n else 0.0
    if want is not None and top > 0 and (top / want > 1.5 or top / want < 1 / 1.5):
        at = int(steps[int(np.argmax(lr))])
        out.append(
            make(
                "history.lr_schedule",
                "warning",
                s.name,
                f"the logged learning rate peaks at {top:.3g} but the run's configuration says {want:.3g} "
                f"({top / want:.3g}x)",
                CHECK,
                "the optimizer was built with another rate than the one configured (a hard-coded value, a "
                "rate scaled by the batch size or the number of devices, a param group with its own lr)",
                step=at,
                kind="differs_from_config",
                logged_peak=top,
                configured=want,
            )
        )
    return out
