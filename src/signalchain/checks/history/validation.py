"""Training against validation: `history.overfit_gap`, `history.valid_below_train`, `history.valid_constant`.

- `overfit_gap` (warning): with at least 4 evaluations, at least 3 after the validation minimum, the
  mean of the last 3 evaluations stands above the mean of the 3 around the minimum by more than 4x
  the evaluations' own noise and 3 %, while the training loss at those evaluations keeps falling:
  the model memorises. The step is the minimum's (the checkpoint to keep).
- `valid_below_train` (warning): on at least 80 % of at least 4 evaluations, and on the last one, the
  validation loss is more than 15 % below the training loss at the same step. Dropout or augmentation
  that run only in training put validation a little below training by design (DESIGN §4), hence the
  margin and the warning: the message gives both readings.
- `valid_constant` (warning): 3 or more evaluations in a row give exactly the same validation loss
  while the training loss moves: the evaluation does not measure the model (a cached result, a
  constant batch, the model evaluated before loading its weights); the training loss's level must
  have moved meanwhile by more than 2 % and 3x its noise, so a model that does not change is left
  to the plateau and schedule judges.
"""

from __future__ import annotations

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import finite_points, fmt_step, log_noise

__all__ = ["judge_validation"]

CHECK = "checks.history.validation"


def _train_at(run: RunHistory, steps: np.ndarray) -> np.ndarray | None:
    """The training loss around each evaluation step: the median of its points in the half-interval
    before it (so noise per step does not decide)."""
    s = run.first("train_loss")
    if s is None:
        return None
    _, ts, tv = finite_points(s)
    if len(tv) < 2:
        return None
    out = []
    prev = ts[0] - 1
    for st in steps:
        lo = st - max(1, (st - prev) // 2)
        sel = tv[(ts > lo) & (ts <= st)]
        out.append(float(np.median(sel)) if len(sel) else float(np.interp(st, ts, tv)))
        prev = st
    return np.array(out)


def judge_validation(run: RunHistory) -> list[Finding]:
    v = run.first("valid_loss")
    if v is None:
        return []
    _, steps, vals = finite_points(v)
    out: list[Finding] = []
    trains = _train_at(run, steps)
    train_noise = log_noise(trains) if trains is not None else 0.0
    # constant evaluations
    same = 1
    for i in range(1, len(vals)):
        same = same + 1 if vals[i] == vals[i - 1] else 1
        # the model changed meanwhile: the training loss's level moved beyond its own noise (a frozen
        # model gives a constant evaluation rightly: that is the plateau's and the schedule's finding)
        moved = trains is not None and abs(np.log(trains[i] / trains[i - same + 1])) > max(0.02, 3 * train_noise)
        if same >= 3 and moved:
            first = int(steps[i - same + 1])
            out.append(
                make(
                    "history.valid_constant",
                    "warning",
                    v.name,
                    f"{same} evaluations in a row give exactly {vals[i]!r} (from {fmt_step(run, first)}) while the "
                    "training loss moves",
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
        if (
            len(vals) - m >= 4
            and last - low > max(4 * noise, 0.03 * low)
            and np.all(vals[-3:] > low)
            and trains is not None
            and trains[-1] < trains[m]
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
            below = vals < 0.85 * trains
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
