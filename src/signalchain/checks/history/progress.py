"""Whether the loss learnt: `history.plateau`, `history.codebook_stalled`, `history.epoch_boundary`.

- `plateau` / `from_start` (warning): over a run of at least 20 points, the lowest mean training loss
  of any later quarter of the run is within its own noise (2 standard errors of the two means, and at least 1 %) of the
  mean of the first quarter. `uniform` (warning): the level at the end is within 2 % of
  ln(V) for a vocabulary size the run's configuration states (`vocab_size`, `card`, `cardinality`):
  the model predicts a uniform distribution. Without V, silent.
- `codebook_stalled` (warning): with per-codebook losses of at least 2 codebooks, one codebook's
  relative drop (first 10 % to last 10 %) is below a quarter of the median drop of the others, while
  those dropped by at least 5 %.
- `epoch_boundary` (warning): with an epoch counter logged, the loss jumps the same way (up, or down)
  across at least 3 epoch boundaries, each jump above 3x the curve's noise, and the median jump at
  boundaries above 5x the median jump between the same number of points elsewhere: a sawtooth that
  restarts each epoch (data in the same order every epoch, a loader whose order restarts, a state
  reset per epoch).
"""

from __future__ import annotations

import math

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import finite_points, fmt_step, log_noise

__all__ = ["judge_plateau", "judge_codebooks", "judge_epoch_boundary"]

CHECK = "checks.history.progress"
_VOCAB = ("vocab_size", "card", "cardinality", "codebook_size", "n_vocab")


def _ends(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = max(2, len(vals) // 10)
    return vals[:k], vals[-k:]


def judge_plateau(run: RunHistory) -> list[Finding]:
    s = run.first("train_loss")
    if s is None:
        return []
    _, steps, vals = finite_points(s)
    if len(vals) < 20:
        return []
    q = len(vals) // 4  # quarters: enough points that noise per step does not decide
    # the lowest quarter anywhere after the first: a loss that fell and later rose (a corrupted shard, a
    # divergence) did learn; what happened later is another judge's
    cs = np.concatenate([[0.0], np.cumsum(vals)])
    means = (cs[q:] - cs[:-q]) / q  # the mean of every q consecutive points, linear in the log's length
    j = q + int(np.argmin(means[q:])) if len(means) > q else len(vals) - q
    head, tail = vals[:q], vals[j : j + q]
    a, b = float(np.mean(head)), float(np.mean(tail))
    se = math.sqrt(float(np.var(head)) / len(head) + float(np.var(tail)) / len(tail))
    out = []
    vocab = next(
        (
            run.config[k]
            for k in _VOCAB
            if isinstance(run.config.get(k), (int, float))
            and not isinstance(run.config.get(k), bool)
            and run.config[k] > 1
        ),
        None,
    )
    if vocab is not None and abs(b - math.log(vocab)) <= 0.02 * math.log(vocab):
        out.append(
            make(
                "history.plateau",
                "warning",
                s.name,
                f"the training loss ends at {b:.4g}, ln({int(vocab)}) = {math.log(vocab):.4g}: the model predicts "
                "every token as equally likely",
                CHECK,
                "the targets carry no information the model can use: targets not aligned with the inputs "
                "(shifted twice or not at all), labels shuffled against their inputs, or a loss on "
                "padding only; `signalchain doctor --symptom flat-loss` on the pipeline names which",
                step=int(steps[0]),
                kind="uniform",
                level=b,
                ln_vocab=math.log(vocab),
            )
        )
    elif a - b <= max(2.0 * se, 0.01 * abs(a)):
        out.append(
            make(
                "history.plateau",
                "warning",
                s.name,
                f"the training loss does not fall: {a:.4g} over the first quarter of the run, {b:.4g} over the last "
                f"quarter ({len(vals)} points, to {fmt_step(run, int(steps[-1]))})",
                CHECK,
                "check that the optimizer steps with a non-zero rate on the parameters that the loss "
                "depends on: `signalchain doctor --symptom flat-loss` (overfit one batch, gradient reach, "
                "learning-rate sweep)",
                step=int(steps[0]),
                kind="from_start",
                first=a,
                last=b,
                stderr=se,
            )
        )
    return out


def judge_codebooks(run: RunHistory) -> list[Finding]:
    books = [s for s in run.by_role("train_codebook_loss") if np.isfinite(s.values).sum() >= 4]
    if len(books) < 2:
        return []
    drops = []
    for s in books:
        _, _, v = finite_points(s)
        head, tail = _ends(v)
        h = float(np.mean(head))
        drops.append((h - float(np.mean(tail))) / h if h > 0 else 0.0)
    out = []
    for i, s in enumerate(books):
        others = [d for j, d in enumerate(drops) if j != i]
        typical = float(np.median(others))
        if typical >= 0.05 and drops[i] < 0.25 * typical:
            _, steps, v = finite_points(s)
            out.append(
                make(
                    "history.codebook_stalled",
                    "warning",
                    s.name,
                    f"codebook {s.codebook} ({s.name}) falls by {drops[i]:.1%} over the run while the other "
                    f"codebooks fall by {typical:.1%} (median): it is not learning",
                    CHECK,
                    "its targets or its head are cut off: a head detached or not in the optimizer, targets of "
                    "that codebook shifted by a wrong delay, or its labels all ignore-index; compare its "
                    "targets with the others' at `tokens.pattern`",
                    step=int(steps[0]),
                    codebook=s.codebook,
                    drop=drops[i],
                    others_drop=typical,
                )
            )
    return out


def judge_epoch_boundary(run: RunHistory) -> list[Finding]:
    s, e = run.first("train_loss"), run.first("epoch")
    if s is None or e is None or run.axis == "epoch":
        return []
    idx, steps, vals = finite_points(s)
    if len(vals) < 30 or (vals <= 0).any():
        return []
    ep = np.interp(steps, e.steps, e.values)  # the epoch at each loss point
    # the epoch in progress: HF logs epoch 1.0 on the last step of epoch 0, Lightning an integer per epoch
    whole = np.ceil(ep - 1e-9)
    bounds = np.nonzero(np.diff(whole) > 0)[0] + 1  # first point of each new epoch
    logs = np.log(vals)
    k = max(2, min(5, len(vals) // 40))
    bounds = [b for b in bounds if k <= b <= len(vals) - k]
    if len(bounds) < 3:
        return []

    cs = np.concatenate([[0.0], np.cumsum(logs)])
    pos = np.arange(k, len(vals) - k + 1)
    jumps = ((cs[pos + k] - cs[pos]) - (cs[pos] - cs[pos - k])) / k  # mean after - mean before, at each point
    at = jumps[np.asarray(bounds) - k]
    near = np.zeros(len(pos), dtype=bool)
    for b in bounds:
        near[max(0, b - k - k) : b - k + k + 1] = True  # within k points of a boundary
    others = jumps[~near]
    noise = log_noise(vals)
    if not len(others):
        return []
    same_way = (at > 3 * noise).all() or (at < -3 * noise).all()  # up at every boundary, or down at every one
    if same_way and np.median(np.abs(at)) > 5 * max(np.median(np.abs(others)), 1e-12):
        first = int(steps[bounds[0]])
        return [
            make(
                "history.epoch_boundary",
                "warning",
                s.name,
                f"the loss jumps {'up' if at[0] > 0 else 'down'} at each of {len(bounds)} epoch boundaries (median "
                     f"x{math.exp(np.median(at)):.3g}, "
                f"against x{math.exp(np.median(np.abs(others))):.3g} between other points), first at "
                f"{fmt_step(run, first)}",
                CHECK,
                "the model relearns the same order each epoch: shuffle the training data every epoch "
                "(shuffle=True, or DistributedSampler.set_epoch(epoch)), and check that nothing is reset per "
                "epoch (an optimizer or scheduler built inside the epoch loop)",
                step=first,
                boundaries=len(bounds),
                median_jump=float(np.median(at)),
            )
        ]
    return []
