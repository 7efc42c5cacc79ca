"""Judge the learning-rate sweep: where does the loss diverge, and is the configured rate there?

A short sweep favours larger rates (short-horizon bias), so it places the configured rate against
divergence only; whether a rate is too small is `rates.judge_rates`'s to judge.
"""

from __future__ import annotations

import math

from ...findings import Finding
from ...records.optimisation import SweepMeasurement
from ..base import make

__all__ = ["judge_sweep", "sweep_summary"]

CHECK = "checks.training"


def sweep_summary(s: SweepMeasurement) -> dict[str, float | None]:
    finals = [min(ls[-2:]) if ls and all(math.isfinite(x) for x in ls) else math.inf for ls in s.losses]
    ok = [i for i, f in enumerate(finals) if math.isfinite(f) and f < s.initial + 0.5]
    best = min(ok, key=lambda i: finals[i]) if ok else None
    diverge = next((s.lrs[i] for i in range(len(s.lrs)) if (best is None or i > best) and i not in ok), None)
    conf = s.lrs.index(s.configured) if s.configured in s.lrs else None
    return {
        "best_lr": s.lrs[best] if best is not None else None,
        "best_loss": finals[best] if best is not None else None,
        "diverge_lr": diverge,
        "configured_loss": finals[conf] if conf is not None else None,
        "initial": s.initial,
    }


def _sweep_skipped(s: SweepMeasurement) -> list[Finding]:
    """No rate was swept: the optimizer computes its own (a relative step), so none can be set."""
    own = s.extra.get("own_rate")
    if not own:
        return []
    relative = any(bool(r) for r in s.extra.get("relative_step") or [])
    return [make("optim.lr_sweep_skipped", "info", "optimizer",
                 f"{own} computes every group's learning rate itself at each step (the groups' lr is None"
                 + (", relative_step=True" if relative else "") + "): no rate set from outside reaches the "
                 "updates, so the learning-rate sweep was skipped and the overfit test runs at the optimizer's "
                 "own rate", CHECK,
                 hint="nothing to do; to place a rate against divergence, give the optimizer a fixed rate "
                      + ("(relative_step=False, lr=...) " if relative else "") + "and run the doctor again",
                 optimizer=own, relative_step=relative)]


def judge_sweep(s: SweepMeasurement) -> list[Finding]:
    """Place the configured learning rate against the divergent ones (`optim.lr_too_large`). A short
    sweep favours larger rates, so a configured rate below its best is no finding here: what the
    configured rate does at the user's horizon is `rates.judge_rates`'s to judge."""
    if not s.lrs:
        return _sweep_skipped(s)
    summ = sweep_summary(s)
    best, diverge, conf = summ["best_lr"], summ["diverge_lr"], s.configured
    out: list[Finding] = []
    ev = {"lrs": s.lrs, "losses": s.losses, **summ, "configured_lr": conf}
    if best is None:
        return [make("optim.lr_too_large", "warning", "optimizer",
                     "no learning rate in the sweep lowered the loss: every one stalled or diverged", CHECK,
                     hint="the optimisation path may be broken; see the gradient findings", **ev)]
    gain_best = s.initial - float(summ["best_loss"] or s.initial)
    gain_conf = (
        s.initial - float(summ["configured_loss"])
        if summ["configured_loss"] is not None and math.isfinite(summ["configured_loss"])
        else -math.inf
    )
    if diverge is not None and conf >= diverge:
        out.append(make("optim.lr_too_large", "error", "optimizer",
                        f"the configured learning rate {conf:.3g} is at or above the rate where the loss diverges "
                        f"({diverge:.3g}); the best in the sweep is {best:.3g}", CHECK,
                        hint=f"use about {best:.2g} (or up to {best * 3:.2g} with warm-up)", **ev))
    elif conf > 10 * best and gain_conf < 0.5 * gain_best:
        out.append(
            make(
                "optim.lr_too_large",
                "warning",
                "optimizer",
                f"the configured learning rate {conf:.3g} is {conf / best:.0f}× the best in the sweep ({best:.3g}) "
                f"and gains {gain_conf:.3f} nats against {gain_best:.3f}",
                CHECK,
                hint=f"try {best:.2g}",
                **ev,
            )
        )
    return out
