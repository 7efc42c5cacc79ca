"""The optimisation family: gradient reach, parameter updates, stale predictions, the learning-rate
sweep and the overfit-one-batch verdict that names which connection broke."""

from __future__ import annotations

from typing import Any

from ...checks.gradients import judge_gradients, judge_update
from ...checks.stale import judge_predictions
from ...checks.training import (
    judge_curve_stability,
    judge_overfit,
    judge_sweep,
    needs_refit,
    sweep_summary,
)
from ...findings import Finding
from ...records.optimisation import (
    CurveMeasurement,
    GradientMeasurement,
    SweepMeasurement,
    UpdateMeasurement,
)
from ..context import Context, Knob
from ..doctor import PRIOR, SELF, Family, Step, judge, register
from ..gradients import measure_gradients
from ..lr_sweep import measure_lr_sweep
from ..overfit import measure_overfit, overfit_at
from ..stale import measure_predictions
from ..update import measure_update

__all__: list[str] = []

KNOBS = {
    "overfit_steps": Knob(30, 60, 150, "updates of the overfit-one-batch run"),
    "sweep_lrs": Knob(7, 10, 16, "learning rates swept"),
    "sweep_steps": Knob(3, 4, 6, "updates per swept rate"),
    "probe_steps": Knob(5, 8, 16, "updates of the probe above the best rate"),
    "update_steps": Knob(3, 3, 5, "updates whose relative parameter change is measured"),
}


def _trainable(ctx: Context) -> set[str] | None:
    grads: GradientMeasurement | None = ctx.result("optimisation.gradients")
    return {q.name for q in grads.params if q.requires_grad} if grads is not None else None


def _predictions(ctx: Context) -> Any:
    return measure_predictions(ctx, ctx.fresh_model())


def _best_lr(ctx: Context, curve: CurveMeasurement, prior: list[Finding], sweep: SweepMeasurement | None) -> float | None:
    """The sweep's best rate when every connection holds but the configured rate is far from it."""
    return needs_refit(curve, prior, sweep)


def _refit(ctx: Context) -> list[float]:
    # Every connection holds but the rate is far from the sweep's best: fit again at the best rate
    # before blaming either the rate or the model's capacity.
    curve = ctx.result("optimisation.overfit")
    curve.best_lr_losses = overfit_at(ctx, ctx.result("optimisation.best_lr")) or []  # type: ignore[union-attr]
    return curve.best_lr_losses  # type: ignore[union-attr]


def _show_gradients(grads: GradientMeasurement) -> dict[str, Any]:
    return {"gradients": {q.name: q.grad_norm for q in grads.params}}


def _show_update(upd: UpdateMeasurement) -> dict[str, Any]:
    return {"update": upd.layer_ratio}


def _show_sweep(sweep: SweepMeasurement) -> dict[str, Any]:
    return {"lr_sweep": {"lrs": sweep.lrs, "losses": sweep.losses, "configured": sweep.configured,
                         "probe_lr": sweep.probe_lr, "probe_losses": sweep.probe_losses,
                         "probe_grad_norms": sweep.probe_grad_norms, **sweep_summary(sweep)}}


def _show_overfit(curve: CurveMeasurement) -> dict[str, Any]:
    return {"overfit": {"losses": curve.losses, "grad_norms": curve.grad_norms,
                        "unigram_entropy": curve.unigram_entropy, "best_lr_losses": curve.best_lr_losses}}


def _has_curve(ctx: Context) -> bool:
    return ctx.result("optimisation.overfit") is not None


register(Family("optimisation", "Optimisation path: gradients, updates, stale predictions, overfit, learning rate",
                after=("data", "numerics"), knobs=KNOBS, steps=(
    Step("gradients", say="optimisation: gradient reach", measure=measure_gradients,
         judges=(judge(judge_gradients, SELF, PRIOR),), show=_show_gradients),
    Step("update", say="optimisation: parameter update", measure=measure_update,
         judges=(judge(judge_update, SELF, _trainable),), show=_show_update),
    Step("predictions", needs=("loader",), say="optimisation: stale predictions", measure=_predictions,
         judges=(judge_predictions,)),
    Step("lr_sweep", say="optimisation: learning-rate sweep", measure=measure_lr_sweep,
         judges=(judge_sweep,), show=_show_sweep),
    Step("overfit", say="optimisation: overfit one batch", measure=measure_overfit),
    Step("best_lr", when=_has_curve, measure=_best_lr, reads=("optimisation.overfit", PRIOR, "optimisation.lr_sweep"),
         timing=""),
    Step("overfit_best_lr", when=lambda ctx: ctx.result("optimisation.best_lr") is not None,
         say="optimisation: overfit again at the best learning rate", measure=_refit),
    # The verdict names which of the five connections are broken, from everything found so far.
    Step("verdict", when=_has_curve, reads=("optimisation.overfit",), show=_show_overfit,
         judges=(judge(judge_overfit, SELF, PRIOR, "optimisation.lr_sweep"),
                 judge(judge_curve_stability, SELF, "optimisation.lr_sweep"))),
)))
