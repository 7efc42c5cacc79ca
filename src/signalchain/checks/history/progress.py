"""Whether the loss learnt: `history.plateau`, `history.codebook_stalled`, `history.epoch_boundary`.

- `plateau` / `from_start` (warning): over a run of at least 20 points, no quarter of what follows its
  first 3 points, its first 5 % or its first quarter has a median below theirs by more than 2
  standard errors of the difference (from the curve's own point noise) and 1 %; and the change from
  the first quarter to the median of all the rest, either way, plus 2 standard errors, stays under
  3 % of the level (a noisy curve of few points is too uncertain to call flat): the loss never fell, anywhere.
  `uniform`: the last quarter's median is within 2 % of ln(V)
  for a vocabulary size the run's configuration states (`vocab_size`, `card`, `cardinality`): the
  model predicts a uniform distribution. `unigram`: the same at the targets' unigram entropy when the
  configuration states it (`unigram_entropy`): the model learned token frequencies, no context. Both
  are warnings from 20 points, info below; without the number in the configuration, silent. The step
  is the first one when the loss (running median) was never below that level, else where it settles.
- `codebook_stalled` (warning; info under 6 points): with per-codebook losses of at least 2 codebooks
  (training ones, else validation ones), one codebook's relative drop (first 10 % to last 10 %) is
  below a quarter of the median drop of the others, while those dropped by at least 5 %, and the two
  drops differ by more than 4 standard errors (from each curve's own point noise). `parts_at` is where
  the others have made half their drop and it has not made a quarter of theirs; the step is that, or
  earlier where it stopped falling (its smoothed drop reaches 90 % of its total).
- `epoch_boundary` (warning): with an epoch counter logged (or `steps_per_epoch` configured), the loss
  jumps the same way (up, or down) across at least 3 epoch boundaries, each jump above 3x the curve's
  noise, and the median jump at boundaries above 5x the median jump between the same number of points
  elsewhere: a sawtooth that restarts each epoch (up), or a model that recognises what it has seen
  (down: memorising a small training set).
"""

from __future__ import annotations

import math

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make
from ._curve import finite_points, fmt_step, log_noise, running_median

__all__ = ["judge_plateau", "judge_codebooks", "judge_epoch_boundary"]

CHECK = "checks.history.progress"
_VOCAB = ("vocab_size", "card", "cardinality", "codebook_size", "n_vocab")
FLAT_BOUND = 0.03  # "flat": the fall, plus 2 standard errors, under 3 % of the level
_UNIGRAM = ("unigram_entropy", "target_entropy", "token_entropy")
_STEPS_PER_EPOCH = ("steps_per_epoch", "num_update_steps_per_epoch", "iters_per_epoch", "updates_per_epoch")


def _ends(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = max(3, len(vals) // 10) if len(vals) >= 6 else max(1, len(vals) // 3)
    return vals[:k], vals[-k:]


def _robust_mean_se(v: np.ndarray) -> tuple[float, float]:
    """(median, its standard error from 1.4826 x MAD): one outlier moves neither."""
    m = float(np.median(v))
    sd = 1.4826 * float(np.median(np.abs(v - m)))
    return m, 1.2533 * sd / math.sqrt(len(v))


def _config_number(run: RunHistory, keys: tuple[str, ...]) -> float | None:
    for k in keys:
        v = run.config.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            return float(v)
    return None


def _flat_at(run: RunHistory, s, steps: np.ndarray, vals: np.ndarray, target: float, kind: str, what: str, hint: str):
    """A finding when the curve's last points sit within 2 % of `target` (or None)."""
    k = max(3, len(vals) // 4)
    if len(vals) < 4:
        return None
    tail, _ = _robust_mean_se(vals[-k:])
    if abs(tail - target) > 0.02 * target:
        return None
    # from where its running median (over 5 % of the run) stays there: single noisy points do not date it
    smooth = running_median(vals, max(3, len(vals) // 20))
    near = np.abs(smooth - target) <= 0.02 * target
    far = np.nonzero(~near)[0]
    settles = min(int(far[-1]) + 1 if len(far) else 0, len(vals) - k)  # from where it stays there
    # a loss never better than that level had the fault from its first step (it only fell from its
    # initial value to it); one that was below it and came back shows it where it settles there
    never_below = bool(np.all(smooth >= target * 0.98))
    first = 0 if never_below else settles
    return make(
        "history.plateau",
        "warning" if len(vals) >= 20 else "info",  # a handful of points: context, not a verdict
        s.name,
        f"the training loss sits at {tail:.4g} from {fmt_step(run, int(steps[settles]))} to the end, {what} "
        f"= {target:.4g}" + (", and it was never below it" if never_below else ""),
        CHECK,
        hint,
        step=int(steps[first]),
        kind=kind,
        level=tail,
        target=target,
        settles_at=int(steps[settles]),
    )


def judge_plateau(run: RunHistory) -> list[Finding]:
    s = run.first("train_loss")
    if s is None:
        return []
    _, steps, vals = finite_points(s)
    vocab = _config_number(run, _VOCAB)
    if vocab is not None and vocab > 1:
        f = _flat_at(
            run,
            s,
            steps,
            vals,
            math.log(vocab),
            "uniform",
            f"ln({int(vocab)})",
            "the model predicts every token as equally likely: the targets carry nothing it can use (targets "
            "not aligned with the inputs, labels shuffled against their inputs, a loss on padding only) or "
            "nothing is updated; `signalchain doctor --symptom flat-loss` on the pipeline names which",
        )
        if f is not None:
            return [f]
    unigram = _config_number(run, _UNIGRAM)
    if unigram is not None:
        f = _flat_at(
            run,
            s,
            steps,
            vals,
            unigram,
            "unigram",
            "the entropy of the targets' token frequencies",
            "the model learned how often each token occurs and nothing of its context: the inputs do not "
            "reach the prediction (a causal mask that hides everything, inputs and targets misaligned by "
            "more than one step, a condition or prefix dropped); overfit one batch to confirm",
        )
        if f is not None:
            return [f]
    if len(vals) < 20 or (vals <= 0).any():
        return []
    # the first 5 % (a run that fell in its first few points, then converged) and the first quarter (more
    # points, more power on a slow fall) against each quarter of what follows: flat only when neither
    # shows a fall beyond its noise
    sigma0 = log_noise(vals)
    a = b = se = 0.0
    for k in (3, max(3, len(vals) // 20), len(vals) // 4):
        a = float(np.median(vals[:k]))
        rest = vals[k:]
        q = max(3, len(rest) // 4)
        b = min(float(np.median(rest[j : j + q])) for j in range(0, len(rest) - q + 1, q))
        se = 1.2533 * sigma0 * a * math.sqrt(1.0 / k + 1.0 / q)
        if a - b > max(2.0 * se, 0.01 * abs(a)):  # fell beyond its noise and by 1 %: it learnt something
            return []
    # "flat" only when the first quarter against all the rest (the most points, and no minimum taken
    # over segments to bias it) bounds the fall tightly
    rest = vals[k:]
    fall = a - float(np.median(rest))
    bound = 1.2533 * sigma0 * a * math.sqrt(1.0 / k + 1.0 / len(rest))
    if abs(fall) + 2.0 * bound > FLAT_BOUND * abs(a):
        return []  # too noisy to say (or rising: not a plateau): the level may have moved by more than 3 %
    k = len(vals) // 4
    if a - b <= max(2.0 * se, 0.01 * abs(a)):  # (what the loop above left standing)
        return [
            make(
                "history.plateau",
                "warning",
                s.name,
                f"the training loss does not fall: median {a:.4g} over its first {k} points, and the lowest median "
                f"of a quarter of the rest {b:.4g} ({len(vals)} points, to {fmt_step(run, int(steps[-1]))}; noise of "
                f"that difference {se:.2g})",
                CHECK,
                "check that the optimizer steps with a non-zero rate on the parameters that the loss "
                "depends on: `signalchain doctor --symptom flat-loss` (overfit one batch, gradient reach, "
                "learning-rate sweep)",
                step=int(steps[0]),
                kind="from_start",
                first=a,
                lowest=b,
                stderr=se,
            )
        ]
    return []


def _drop_curve(v: np.ndarray) -> np.ndarray:
    """The relative drop of a curve from its start at each point (smoothed over a few points)."""
    head, _ = _ends(v)
    h = float(np.mean(head))
    k = max(1, len(v) // 20)
    smooth = np.convolve(v, np.ones(k) / k, mode="same") if k > 1 else v
    smooth[: k // 2 + 1] = v[: k // 2 + 1]
    return (h - smooth) / h if h > 0 else np.zeros(len(v))


def judge_codebooks(run: RunHistory) -> list[Finding]:
    books = [s for s in run.by_role("train_codebook_loss") if np.isfinite(s.values).sum() >= 4]
    if len(books) < 2:  # no per-codebook training curves: the validation ones say the same
        books = [s for s in run.by_role("valid_codebook_loss") if np.isfinite(s.values).sum() >= 4]
    if len(books) < 2:
        return []
    drops, ses = [], []
    for s in books:
        _, _, v = finite_points(s)
        head, tail = _ends(v)
        h = float(np.mean(head))
        drops.append((h - float(np.mean(tail))) / h if h > 0 else 0.0)
        # the standard error of that relative drop, from the curve's own point noise
        ses.append(log_noise(v[v > 0]) * float(np.sqrt(1.0 / len(head) + 1.0 / len(tail))))
    out = []
    for i, s in enumerate(books):
        others = [d for j, d in enumerate(drops) if j != i]
        typical = float(np.median(others))
        apart = typical - drops[i] > 4.0 * max(ses[i], float(np.median([e for j, e in enumerate(ses) if j != i])))
        if typical >= 0.05 and drops[i] < 0.25 * typical and apart:
            _, steps, v = finite_points(s)
            # where it parts: the first point where the others have made half their drop and it has not
            # made a quarter of that
            mine = _drop_curve(v)
            theirs = []
            for j, o in enumerate(books):
                if j != i:
                    _, os_, ov = finite_points(o)
                    theirs.append(np.interp(steps, os_, _drop_curve(ov)))
            med = np.median(np.array(theirs), axis=0)
            parted = np.nonzero((med >= 0.5 * typical) & (mine < 0.25 * med))[0]
            parts = int(steps[parted[0]]) if len(parted) else int(steps[0])
            # where the problem shows: where this codebook stopped falling (its own drop reaches 90 % of
            # what it ever makes), or where the others leave it (`parts_at`) when that comes first
            stop = np.nonzero(mine >= 0.9 * max(drops[i], 0.0))[0] if drops[i] > 0.01 else np.array([0])
            at = min(int(steps[stop[0]]) if len(stop) else int(steps[0]), parts)
            out.append(
                make(
                    "history.codebook_stalled",
                    "warning" if len(v) >= 6 else "info",
                    s.name,
                    f"codebook {s.codebook} ({s.name}) falls by {drops[i]:.1%} over the run (it stops falling at "
                    f"{fmt_step(run, at)}) while the other codebooks fall by {typical:.1%} (median); they part "
                    f"from {fmt_step(run, parts)}: it is not learning",
                    CHECK,
                    "its targets or its head are cut off: a head detached or not in the optimizer, targets of "
                    "that codebook shifted by a wrong delay, or its labels all ignore-index; compare its "
                    "targets with the others' at `tokens.pattern`",
                    step=at,
                    parts_at=parts,
                    codebook=s.codebook,
                    drop=drops[i],
                    others_drop=typical,
                )
            )
    return out


def _epoch_at(run: RunHistory, steps: np.ndarray) -> np.ndarray | None:
    """The epoch (float) at each step: from the logged counter, else from the configured steps per epoch."""
    e = run.first("epoch")
    if e is not None and np.isfinite(e.values).sum() >= 2:
        ok = np.isfinite(e.values)
        order = np.argsort(e.steps[ok], kind="stable")
        return np.interp(steps, e.steps[ok][order], e.values[ok][order])
    per = _config_number(run, _STEPS_PER_EPOCH)
    return None if per is None else steps / per


def judge_epoch_boundary(run: RunHistory) -> list[Finding]:
    s = run.first("train_loss")
    if s is None or run.axis == "epoch":
        return []
    idx, steps, vals = finite_points(s)
    if len(vals) < 30 or (vals <= 0).any():
        return []
    ep = _epoch_at(run, steps)
    if ep is None:
        return []
    # the epoch in progress: HF logs epoch 1.0 on the last step of epoch 0, Lightning an integer per epoch
    whole = np.ceil(ep - 1e-9)
    bounds = np.nonzero(np.diff(whole) > 0)[0] + 1  # first point of each new epoch
    logs = np.log(vals)
    k = max(2, min(5, len(vals) // 40))
    bounds = [b for b in bounds if k <= b <= len(vals) - k]
    if len(bounds) < 3:
        return []

    # the mean of the k points from b minus that of the k before, at every b (cumulative sums: linear)
    c = np.concatenate([[0.0], np.cumsum(logs)])
    b_all = np.arange(k, len(vals) - k + 1)
    jumps = (c[b_all + k] - c[b_all]) / k - (c[b_all] - c[b_all - k]) / k
    at = jumps[np.array(bounds) - k]
    near = np.zeros(len(vals) + 1, dtype=bool)
    for b in bounds:
        near[max(0, b - k) : b + k + 1] = True
    others = jumps[~near[b_all]]
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
                f"x{math.exp(np.median(at)):.3g}, against x{math.exp(np.median(np.abs(others))):.3g} between other "
                f"points), first at {fmt_step(run, first)}",
                CHECK,
                (
                    "first see what the logged value is: a running mean reset each epoch draws this sawtooth by "
                    "itself (log the per-step loss to tell). Otherwise something restarts each epoch: an optimizer "
                    "or scheduler built inside the epoch loop, a model reloaded, data in the same order each epoch "
                    "(shuffle=True, DistributedSampler.set_epoch(epoch))"
                )
                if at[0] > 0
                else (
                    "a drop at each new epoch is the model recognising examples it has already seen: on a small "
                    "training set that is memorising (compare the validation curve across the same boundaries); "
                    "with data in the same order each epoch it also learns the order (shuffle every epoch)"
                ),
                step=first,
                boundaries=len(bounds),
                median_jump=float(np.median(at)),
            )
        ]
    return []
