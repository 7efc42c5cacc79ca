"""`history.nonfinite`: the first non-finite value of a judged metric, and what moved before it.

An `error` when the training or validation loss goes non-finite and stays so to the end of the log
(the run stopped learning there) or the run was restarted from an earlier checkpoint after it; a
`warning` when the loss comes back finite on the steps that follow (the bad steps were skipped). When
the logged loss stays non-finite but the gradient norm stays finite and non-zero after it, the weights
did not go non-finite: one batch gave a non-finite loss that a running total carried into every later
log (HF Trainer's `tr_loss` with `logging_nan_inf_filter=False`): a `warning` that says so.
A non-finite gradient norm on steps where the loss stays finite afterwards is what an fp16 loss
scaler does by design (it skips those steps and lowers its scale): `info`, never an error (DESIGN §4);
a `warning` only when it goes on all through the run (>= 20 % of the second half's points, at least
5; a burst at the start is a scaler calibrating): a run that barely updates.

"What moved before it" compares the last finite values before the bad step with the same metric's
median over the run before that window: the gradient norm rising, the learning rate jumping, the
loss scale collapsing, the loss itself climbing.
"""

from __future__ import annotations

import numpy as np

from ...findings import Finding
from ...records.history import RunHistory, Series
from ..base import make
from ._curve import fmt_step, window

__all__ = ["judge_nonfinite", "what_moved"]

CHECK = "checks.history.nonfinite"
SKIPPED_SHARE = 0.2  # non-finite gradient norms on this share of the points: most updates skipped
_LOSSES = ("train_loss", "valid_loss", "train_codebook_loss", "valid_codebook_loss")
_JUDGED = ("train_loss", "valid_loss", "grad_norm", "train_codebook_loss", "valid_codebook_loss", "lr", "loss_scale")


def _first_bad(s: Series) -> int | None:
    bad = np.nonzero(~np.isfinite(s.values))[0]
    return int(bad[0]) if len(bad) else None


def _stays_bad_from(s: Series, step: int) -> int | None:
    """The first position of the non-finite stretch of `s` that reaches `step` (None: finite there)."""
    upto = np.nonzero(s.steps <= step)[0]
    if not len(upto) or np.isfinite(s.values[upto[-1]]):
        return None
    good = np.nonzero(np.isfinite(s.values[: upto[-1] + 1]))[0]
    return int(good[-1]) + 1 if len(good) else 0


def _runaway(run: RunHistory, step: int) -> tuple[str, float] | None:
    """(loss name, ratio) when the training loss's median after `step` is over 10x its median before:
    non-finite gradients that were not skipped but diverged the run; None otherwise."""
    s = run.first("train_loss")
    if s is None:
        return None
    ok = np.isfinite(s.values)
    before, after = s.values[ok & (s.steps < step)], s.values[ok & (s.steps >= step)]
    if len(before) < 3 or len(after) < 3:
        return None
    lo = float(np.median(before))
    hi = float(np.median(after))
    return (s.name, hi / lo) if lo > 0 and hi > 10 * lo else None


def _weights_alive(run: RunHistory, step: int) -> tuple[int, int] | None:
    """(finite, logged) gradient norms after `step` when at least 3 were logged and 80 % are finite and
    non-zero: the model kept training, whatever the logged loss says; None otherwise."""
    g = run.first("grad_norm")
    if g is None:
        return None
    after = g.values[g.steps > step]
    ok = int((np.isfinite(after) & (after > 0)).sum())
    return (ok, len(after)) if len(after) >= 3 and ok >= 0.8 * len(after) else None


def _ratio(s: Series | None, step: int, w: int) -> tuple[float, int, int] | None:
    """(last finite value before `step` / median before the window, window's first step, last step)."""
    if s is None:
        return None
    ok = np.isfinite(s.values) & (s.steps < step)
    steps, vals = s.steps[ok], s.values[ok]
    if len(vals) < w + 3:
        return None
    base = float(np.median(np.abs(vals[:-w])))
    if base <= 0:
        return None
    return float(abs(vals[-1]) / base), int(steps[-w]), int(steps[-1])


def what_moved(run: RunHistory, step: int) -> list[str]:
    """Plain sentences: which judged metrics moved in the window before `step`."""
    loss = run.first("train_loss")
    w = window(len(loss)) if loss is not None else 3
    out = []
    r = _ratio(run.first("grad_norm"), step, w)
    if r and r[0] >= 3.0:
        out.append(f"the gradient norm rose {r[0]:.3g}x over its earlier median by step {r[2]} (from step {r[1]})")
    r = _ratio(run.first("lr"), step, w)
    if r and (r[0] >= 2.0 or r[0] <= 0.5):
        out.append(f"the learning rate was {r[0]:.3g}x its earlier median at step {r[2]}")
    r = _ratio(run.first("loss_scale"), step, w)
    if r and r[0] <= 0.25:
        out.append(f"the loss scale fell to {r[0]:.3g}x its earlier median by step {r[2]}")
    r = _ratio(loss, step, w)
    if r and r[0] >= 1.5:
        out.append(f"the training loss rose {r[0]:.3g}x over its earlier median by step {r[2]}")
    return out


def judge_nonfinite(run: RunHistory) -> list[Finding]:
    firsts = []
    for s in run.series.values():
        if s.role in _JUDGED:
            i = _first_bad(s)
            if i is not None:
                firsts.append((int(s.steps[i]), s.name, s, float(s.values[i])))
    if not firsts:
        return []
    losses = [
        f for f in firsts if f[2].role in ("train_loss", "valid_loss", "train_codebook_loss", "valid_codebook_loss")
    ]
    if losses:
        lstep = min(f[0] for f in losses)
        # the loss's failure began where a metric went non-finite and stayed so up to the loss's first
        # bad step; earlier, recovered non-finite points (fp16 skips) are not its start
        starts = []
        for f in firsts:
            st = _stays_bad_from(f[2], lstep)
            if st is not None:
                starts.append((int(f[2].steps[st]), f[1], f[2], float(f[2].values[st])))
        firsts = starts or losses
    # on a tie the loss names it: the gradient norm of the same step is its consequence
    step, name, s, value = min(firsts, key=lambda t: (t[0], t[2].role not in _LOSSES, t[1]))
    moved = what_moved(run, step)
    before = "; ".join(moved) if moved else "no judged metric moved in the window before it"
    runaway = _runaway(run, step)
    if not losses and runaway is None:
        scaler = run.first("loss_scale") is not None
        share = float(np.mean(~np.isfinite(s.values))) if len(s) else 0.0
        # a few skipped steps are what a scaler is for, and a burst at the start is one calibrating its
        # scale; skipped steps all through the second half is a run that barely trains
        late = ~np.isfinite(s.values[len(s) // 2 :])
        many = len(s) >= 10 and float(np.mean(late)) >= SKIPPED_SHARE and int(late.sum()) >= 5
        return [
            make(
                "history.nonfinite",
                "warning" if many else "info",
                name,
                f"{name} is {value} at {fmt_step(run, step)} ({share:.0%} of its logged points non-finite) while the "
                "loss stays finite afterwards"
                + (
                    ": the loss scaler skipped those steps, as fp16 training does by design"
                    if scaler
                    else ": those updates were skipped or clipped away, since the loss kept learning"
                )
                + ("; that many skipped steps is a run that barely updates" if many else ""),
                CHECK,
                "compare that batch in full precision and find the first op that overflows (`signalchain doctor "
                "--symptom nan`); bf16 instead of fp16, or a lower peak learning rate, removes most overflows"
                if many
                else "nothing to fix unless it happens on most steps (then see the loss scale's trend)",
                step=step,
                series=name,
                before=moved,
                nonfinite_share=share,
            )
        ]
    if not losses:  # the gradient went non-finite and the logged loss, though finite, ran away
        lname, ratio = runaway  # type: ignore[misc]
        return [
            make(
                "history.nonfinite",
                "error",
                name,
                f"{name} is {value} at {fmt_step(run, step)} and the logged loss {lname!r} then stands "
                f"{ratio:.3g}x its level before: the run diverged (a filter kept the logged loss finite); "
                f"before it: {before}",
                CHECK,
                "bisect the checkpoints around that step; a rising gradient norm before it points at the learning "
                "rate or missing clipping",
                step=step,
                series=name,
                before=moved,
                loss_series=lname,
                loss_ratio=ratio,
            )
        ]
    lstep, lname, lseries, lvalue = min(losses, key=lambda t: (t[0], t[1]))
    where = (
        f"{name} first at {fmt_step(run, step)} ({value}), the loss {lname!r} from {fmt_step(run, lstep)}"
        if (step, name) != (lstep, lname)
        else f"{name} is {value} from {fmt_step(run, step)}"
    )
    # the loss came back finite, on steps that go on (not a resume from an earlier checkpoint): the bad
    # steps were skipped and the run kept learning — a fault to look at, not a dead run
    bad = np.nonzero(~np.isfinite(lseries.values))[0]
    last_bad = int(bad[-1])
    tail = lseries.values[last_bad + 1 :]
    went_back = bool(np.any(np.diff(lseries.steps[bad[0] :]) < 0))
    recovered = len(tail) >= 3 and bool(np.all(np.isfinite(tail))) and not went_back
    alive = None if recovered else _weights_alive(run, lstep)
    if alive is not None:
        return [
            make(
                "history.nonfinite",
                "warning",
                lname,
                f"{lname} is {lvalue} at {fmt_step(run, lstep)} and logged non-finite from there on, but the gradient "
                f"norm stays finite on {alive[0]} of the {alive[1]} steps logged after it: the weights did not go "
                "non-finite. One batch gave a non-finite loss, and the logged value is an accumulator it poisoned "
                "(HF Trainer adds every step's loss to a running total; with logging_nan_inf_filter=False one NaN "
                "stays in every later log)",
                CHECK,
                "find that step's batch (labels all ignore-index give a mean over no element; a log or a division "
                "of zero); the run itself trained on",
                step=lstep,
                series=lname,
                before=moved,
                weights_alive=True,
                recovered=False,
            )
        ]
    return [
        make(
            "history.nonfinite",
            "warning" if recovered else "error",
            name,
            f"the run goes non-finite: {where}; before it: {before}"
            + (
                f". The loss is finite again on the {len(tail)} points after "
                f"{fmt_step(run, int(lseries.steps[last_bad]))} ({len(bad)} non-finite point(s)): those steps "
                "were skipped"
                if recovered
                else ""
            ),
            CHECK,
            "bisect the checkpoints around that step (the command below), then replay the first bad one: "
            "`signalchain doctor --symptom nan` on its weights names the first op; a rising gradient norm "
            "before it points at the learning rate or missing clipping, a collapsing loss scale at fp16 "
            "overflow, nothing moving at one bad batch (an empty target, a silent clip, a log of 0)",
            step=step,
            series=name,
            before=moved,
            loss_step=lstep,
            loss_series=lname,
            recovered=recovered,
        )
    ]
