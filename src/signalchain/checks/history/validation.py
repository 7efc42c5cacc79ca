"""Training against validation: `history.overfit_gap`, `history.valid_below_train`, `history.valid_constant`.

- `overfit_gap` (warning): with at least 4 evaluations, at least 3 after the validation minimum, the
  mean of the last 3 evaluations stands above the mean of the 3 around the minimum by more than 4x
  the evaluations' own noise, 3 % and 3 rounding steps of the log, while the training loss falls
  over the same steps (medians of the first and last thirds of its points, beyond 2 standard errors;
  both rising is a schedule's end or a divergence, not memorising):
  the model memorises. The step is the minimum's (the checkpoint to keep).
- `valid_below_train` (warning): on at least 80 % of at least 4 evaluations, and on the last one, the
  validation loss is more than 15 % below the training loss at the same step, and more than 2
  standard errors of that training level (the median of the points before the evaluation). Dropout
  or augmentation that run only in training put validation a little below training by design
  (DESIGN §4), hence the margin and the warning: the message gives both readings.
- `valid_constant` (warning): 3 or more evaluations in a row give exactly the same validation loss
  while the training loss's level moves over them (medians of the first and last thirds of its
  points between, beyond 4 standard errors, and 2 %) by more than 3 rounding steps of the validation values;
  a log that rounds also repeats values by chance, so there the run of repeats must have a chance
  under 1 in 1000 over the series (one rounding step against the evaluations' own noise). A model
  that no longer changes repeats them too: that is why the training level must move. Then the
  evaluation does not measure the model (a cached result, a constant batch, the model evaluated
  before loading its weights).
"""

from __future__ import annotations

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import finite_points, fmt_step, log_noise

__all__ = ["judge_validation"]

CHECK = "checks.history.validation"


def _train_at(run: RunHistory, steps: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """The training loss around each evaluation step: the median of its points in the half-interval
    before it (so noise per step does not decide), and how many points each median has."""
    s = run.first("train_loss")
    if s is None:
        return None, np.zeros(len(steps))
    _, ts, tv = finite_points(s)
    if len(tv) < 2:
        return None, np.zeros(len(steps))
    out, counts = [], []
    prev = ts[0] - 1
    for st in steps:
        lo = st - max(1, (st - prev) // 2)
        sel = tv[(ts > lo) & (ts <= st)]
        out.append(float(np.median(sel)) if len(sel) else float(np.interp(st, ts, tv)))
        counts.append(max(1, len(sel)))
        prev = st
    return np.array(out), np.array(counts, dtype=float)


def _resolution(vals: np.ndarray) -> float:
    """The decimal step the log rounded its values to (0.01 for "3.41"), 0 when kept at full precision."""
    for k in range(0, 9):
        scaled = vals * 10.0**k
        if np.all(np.abs(scaled - np.round(scaled)) < 1e-3):  # whole numbers of that step, to float error
            return 10.0**-k
    return 0.0


def _train_change(run: RunHistory, lo: int, hi: int) -> tuple[float, float] | None:
    """The relative change of the training loss's level from step `lo` to `hi` and its standard error:
    medians of the first and last thirds of its log over the points between (at least 6; one outlier
    moves neither), their centres 2/3 of the span apart. None when there are too few points."""
    s = run.first("train_loss")
    if s is None:
        return None
    _, ts, tv = finite_points(s)
    sel = (ts >= lo) & (ts <= hi) & (tv > 0)
    if sel.sum() < 6 or hi <= lo:
        return None
    y = np.log(tv[sel])
    m = len(y) // 3
    change = float(np.median(y[-m:]) - np.median(y[:m]))
    # the noise of a point: the whole curve's, or these points' own when larger (noise that changes
    # over a run, a batch size that changed)
    se = 1.2533 * max(log_noise(tv), log_noise(tv[sel])) * float(np.sqrt(2.0 / m))
    return 1.5 * change, 1.5 * se


def _train_trend(run: RunHistory, lo: int, hi: int) -> float | None:
    """The training level's change from `lo` to `hi` when it is beyond 4 standard errors (the model
    evidently changed), else None."""
    got = _train_change(run, lo, hi)
    return got[0] if got is not None and abs(got[0]) > 4 * got[1] else None


def judge_validation(run: RunHistory) -> list[Finding]:
    v = run.first("valid_loss")
    if v is None:
        return []
    _, steps, vals = finite_points(v)
    out: list[Finding] = []
    trains, counts = _train_at(run, steps)
    # constant evaluations: identical to the last digit while the model evidently changed. A log that
    # rounds (2 decimals in a CSV) repeats values at a plateau, so the training loss must have moved by
    # more than its own noise and by several rounding steps of the validation values.
    quantum = _resolution(vals)
    same = 1
    for i in range(1, len(vals)):
        same = same + 1 if vals[i] == vals[i - 1] else 1
        if same < 3:
            continue
        lo = i - same + 1
        moved = _train_trend(run, int(steps[lo]), int(steps[i]))
        # rounded values also repeat by chance: two in a row with probability about one rounding step
        # over the spread of a difference of two evaluations; the run of repeats must be unlikely by
        # chance anywhere in the series (1 in 1000)
        vnoise = log_noise(vals) * abs(float(vals[i]))
        p = 0.0 if quantum == 0 else 1.0 if vnoise == 0 else min(1.0, quantum / (np.sqrt(2.0) * vnoise))
        chance = p ** (same - 1) * len(vals)
        big = moved is not None and abs(moved) > 0.02  # and by 2 %: the model changed, visibly
        if big and abs(moved) * abs(float(vals[i])) > 3 * quantum and chance < 1e-3:
            first = int(steps[lo])
            out.append(
                make(
                    "history.valid_constant",
                    "warning",
                    v.name,
                    f"{same} evaluations in a row give exactly {float(vals[i])!r} (from {fmt_step(run, first)} to "
                    f"{fmt_step(run, int(steps[i]))}) while the training loss moves by {abs(moved):.1%} over them",
                    CHECK,
                    "the evaluation does not see the current model: a cached result, the same stored logits, a "
                    "model copy evaluated before the weights were loaded, or an eval set of one constant batch",
                    step=first,
                    value=float(vals[i]),
                    evaluations=same,
                )
            )
            break
    if len(vals) >= 4:
        m = int(np.argmin(vals))
        noise = log_noise(vals) * float(vals[m])
        # the minimum of noisy evaluations is biased low: compare the means of 3 around it and the last 3
        low = float(np.mean(vals[max(0, m - 1) : m + 2]))
        last = float(np.mean(vals[-3:]))
        train = _train_change(run, int(steps[m]), int(steps[-1]))
        # the training loss fell meanwhile (beyond 2 standard errors): when it rises too, or its noise hides
        # which way it went, a rising validation is a schedule's end or a divergence, not memorising
        fell = None if train is None or train[0] > -2 * train[1] else train[0]
        if (
            len(vals) - m >= 4
            and last - low > max(4 * noise, 0.03 * low, 3 * _resolution(vals))
            and np.all(vals[-3:] > low)
            and trains is not None
            and fell is not None
            and fell < 0
        ):
            out.append(
                make(
                    "history.overfit_gap",
                    "warning",
                    v.name,
                    f"the validation loss is lowest at {fmt_step(run, int(steps[m]))} ({vals[m]:.4g}) and rises to "
                    f"{vals[-1]:.4g} by {fmt_step(run, int(steps[-1]))} while the training loss falls from "
                    f"{trains[m]:.4g} to {trains[-1]:.4g}: the model memorises its training set",
                    CHECK,
                    "keep the checkpoint at the validation minimum; more data or augmentation, more dropout or "
                    "weight decay, a smaller model or fewer epochs; check the training set is not tiny or "
                    "repeated",
                    step=int(steps[m]),
                    best=float(vals[m]),
                    last=float(vals[-1]),
                )
            )
        if trains is not None:
            # beyond 15 %, and beyond 2 standard errors of the training level the evaluation is set against
            tnoise = log_noise(finite_points(run.first("train_loss"))[2])
            margin = np.log(1 / 0.85) + 2 * 1.2533 * tnoise / np.sqrt(np.maximum(counts, 1))
            below = np.log(trains / vals) > margin
            if below.mean() >= 0.8 and below[-1]:
                first = int(steps[int(np.argmax(below))])
                out.append(
                    make(
                        "history.valid_below_train",
                        "warning",
                        v.name,
                        f"validation is more than 15 % below training on {below.sum()} of {len(vals)} "
                        f"evaluations (last: {vals[-1]:.4g} against {trains[-1]:.4g}); dropout or augmentation "
                        "that run only in training explain a small gap, not usually one this large",
                        CHECK,
                        "check the validation set for clips (or crops of them) that are also in training, a "
                        "validation set that is easier (shorter, silent, other preprocessing), or a loss "
                        "averaged differently (per token against per batch): `signalchain audit` on the splits",
                        step=first,
                        ratio=float(np.median(vals / trains)),
                    )
                )
    return out
