"""The optimisation family: gradient reach, parameter updates, stale predictions, the learning-rate
sweep and the overfit-one-batch verdict that names which connection broke."""

from __future__ import annotations

from typing import Any

from ...checks.optimisation.curves import (
    judge_curve_stability,
    judge_flat_loss,
    judge_overfit,
    judge_sweep,
    needs_refit,
    sweep_summary,
)
from ...checks.optimisation.gradients import judge_gradients, judge_update
from ...checks.optimisation.predictions import judge_predictions
from ...findings import Finding
from ...records.figures import Bars, Curves, Figure, Table, Text
from ...records.optimisation import (
    CurveMeasurement,
    GradientMeasurement,
    SweepMeasurement,
    UpdateMeasurement,
)
from ..context import Context, Knob
from ..doctor import PRIOR, SELF, Family, Step, judge, register
from ..optimisation.gradients import measure_gradients
from ..optimisation.lr_sweep import measure_lr_sweep
from ..optimisation.overfit import measure_overfit, overfit_at
from ..optimisation.predictions import measure_predictions
from ..optimisation.update import measure_update

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


def _best_lr(
    ctx: Context, curve: CurveMeasurement, prior: list[Finding], sweep: SweepMeasurement | None
) -> float | None:
    """The sweep's best rate when every connection holds but the configured rate is far from it."""
    return needs_refit(curve, prior, sweep)


def _refit(ctx: Context) -> list[float]:
    # Every connection holds but the rate is far from the sweep's best: fit again at the best rate
    # before blaming either the rate or the model's capacity.
    curve = ctx.result("optimisation.overfit")
    curve.best_lr_losses = overfit_at(ctx, ctx.result("optimisation.best_lr")) or []  # type: ignore[union-attr]
    return curve.best_lr_losses  # type: ignore[union-attr]


def _show_gradients(grads: GradientMeasurement) -> dict[str, Figure]:
    values = {q.name: q.grad_norm for q in grads.params}
    return {"gradients": Bars("Gradient norm per parameter (one backward)", values, x_label="norm")} if values else {}


def _show_update(upd: UpdateMeasurement) -> dict[str, Figure]:
    if not upd.layer_ratio:
        return {}
    return {"update": Bars("Relative update |Δθ|/|θ| per module after a few steps", upd.layer_ratio, x_label="ratio")}


def _show_sweep(sweep: SweepMeasurement) -> dict[str, Figure]:
    lrs, losses = sweep.lrs, sweep.losses
    if not lrs:
        return {}
    summary = sweep_summary(sweep)
    finals = [min(ls[-2:]) if ls else float("nan") for ls in losses]
    lines = {"configured": sweep.configured}
    if summary["best_lr"]:
        lines["best"] = summary["best_lr"]
    if summary["diverge_lr"]:
        lines["diverges"] = summary["diverge_lr"]
    start = sweep.initial
    out: dict[str, Figure] = {
        "lr_sweep": Curves(
            "Learning-rate sweep (diverged runs above the top edge)",
            {
                "loss after a few steps from the same start": [list(lrs), finals],
                "start": [[lrs[0], lrs[-1]], [start, start]],
            },
            x_label="learning rate",
            y_label="loss",
            logx=True,
            vlines=lines,
            ylim=[0.0, 1.5 * start],
        )
    }
    if sweep.probe_losses:
        out["lr_sweep.probe"] = Curves(
            f"Probe above the best rate (lr {sweep.probe_lr:.3g})",
            {"loss": [list(range(len(sweep.probe_losses))), list(sweep.probe_losses)],
             "gradient norm": [list(range(len(sweep.probe_grad_norms))), list(sweep.probe_grad_norms)]},
            x_label="step", y_label="", logy=True)
    out["lr_sweep.losses"] = Table("Losses of each swept rate", ["learning rate", "losses"],
                                   [[f"{lr:.3g}", " → ".join(f"{x:.3f}" for x in ls)] for lr, ls in zip(lrs, losses)])
    return out


def _show_overfit(curve: CurveMeasurement) -> dict[str, Figure]:
    losses = curve.losses
    if not losses:
        return {"overfit": Text("Overfit one batch (regularisation off)", "no overfit run")}
    series = {"loss on the golden batch": [list(range(len(losses))), list(losses)]}
    if curve.unigram_entropy is not None:
        h = curve.unigram_entropy
        series["unigram entropy of the targets"] = [[0, len(losses) - 1], [h, h]]
    if curve.best_lr_losses:
        series["loss at the sweep's best rate"] = [list(range(len(curve.best_lr_losses))), list(curve.best_lr_losses)]
    out: dict[str, Figure] = {"overfit": Curves("Overfit one batch (regularisation off)", series, x_label="step",
                                                y_label="cross-entropy (nats)")}
    if curve.grad_norms:
        out["overfit.grad_norms"] = Curves("Gradient norm during the overfit run",
                                           {"total gradient norm": [list(range(len(curve.grad_norms))),
                                                                    list(curve.grad_norms)]},
                                           x_label="step", y_label="norm", logy=True)
    return out


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
    Step("overfit", say="optimisation: overfit one batch", measure=measure_overfit, judges=(judge_flat_loss,)),
    Step("best_lr", when=_has_curve, measure=_best_lr, reads=("optimisation.overfit", PRIOR, "optimisation.lr_sweep"),
         timing=""),
    Step("overfit_best_lr", when=lambda ctx: ctx.result("optimisation.best_lr") is not None,
         say="optimisation: overfit again at the best learning rate", measure=_refit),
    # The verdict names which of the five connections are broken, from everything found so far.
    Step("verdict", when=_has_curve, reads=("optimisation.overfit",), show=_show_overfit,
         judges=(judge(judge_overfit, SELF, PRIOR, "optimisation.lr_sweep"),
                 judge(judge_curve_stability, SELF, "optimisation.lr_sweep"))),
)))
