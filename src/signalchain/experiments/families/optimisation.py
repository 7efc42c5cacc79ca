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
from ...checks.optimisation.grad_rule import (
    judge_clip_order,
    judge_grad_rule,
    judge_schedule_steps,
    judge_train_mode,
    judge_zeroing,
)
from ...checks.optimisation.gradients import judge_gradients, judge_update
from ...checks.optimisation.predictions import judge_predictions
from ...checks.optimisation.rates import judge_rates, lost_at
from ...checks.optimisation.state_loads import judge_state_loads
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
from ..optimisation.grad_rule import measure_grad_rule
from ..optimisation.gradients import measure_gradients
from ..optimisation.lr_sweep import measure_lr_sweep
from ..optimisation.overfit import measure_overfit, overfit_at
from ..optimisation.predictions import measure_predictions
from ..optimisation.state_loads import measure_state_loads
from ..optimisation.update import measure_update

__all__: list[str] = []

KNOBS = {
    "overfit_steps": Knob(30, 60, 150, "updates of the overfit-one-batch run"),
    "sweep_lrs": Knob(7, 10, 16, "learning rates swept"),
    "sweep_steps": Knob(3, 4, 6, "updates per swept rate"),
    "probe_steps": Knob(5, 8, 16, "updates of the probe above the best rate"),
    "update_steps": Knob(3, 3, 5, "updates whose relative parameter change is measured"),
}
#: When the first re-fit rate (the sweep's best) does not memorise one batch, one more at this
#: fraction of it: a 4-step sweep's best is often too large for a longer run.
REFIT_LOWER = 0.1


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
    # Every connection holds but the configured settings did not memorise one batch: fit again with
    # plain updates at the sweep's best rate, then at a tenth of it, before calling it capacity. One
    # batch memorised at any rate answers the test's question: the path is connected.
    from ...checks.optimisation.curves import memorised, overfit_target

    curve: CurveMeasurement = ctx.result("optimisation.overfit")
    best = float(ctx.result("optimisation.best_lr"))
    for lr in (best, best * REFIT_LOWER):
        losses = overfit_at(ctx, lr) or []
        curve.refit_lrs.append(lr)
        curve.refit_losses.append(losses)
        if memorised(losses, overfit_target(curve)):
            break
    curve.best_lr_losses = curve.refit_losses[0]
    return curve.best_lr_losses


def _show_gradients(grads: GradientMeasurement) -> dict[str, Figure]:
    values = {q.name: q.grad_norm for q in grads.params}
    return {"gradients": Bars("Gradient norm per parameter (one backward)", values, x_label="norm")} if values else {}


def _show_update(upd: UpdateMeasurement) -> dict[str, Figure]:
    out: dict[str, Figure] = {}
    if upd.layer_ratio:
        out["update"] = Bars("Relative update |Δθ|/|θ| per module after a few steps", upd.layer_ratio, x_label="ratio")
    rows = []
    for g in upd.groups:
        if not g.with_grad:
            continue
        lost = lost_at(g, g.configured_lr) if g.configured_lr else None
        rows.append([str(g.group), f"{g.values:,}", g.dtype,
                     f"{g.configured_lr:.3g}" if g.configured_lr is not None else "set by the optimizer",
                     " → ".join("—" if r is None else f"{r:.3g}" for r in g.step_lrs),
                     f"{g.ratio:.2g}" if g.ratio is not None else "—",
                     f"{lost:.1%}" if lost is not None else "—",
                     f"{g.stuck / g.with_grad:.1%}",
                     f"{g.eps_share:.0%} (eps {g.eps:.0e})" if g.eps_share is not None and g.eps else "—"])
    if rows:
        out["update.rates"] = Table(
            "The configured rate at work: a few real updates per parameter group",
            ["group", "values", "dtype", "configured lr", "rate at each step", "|Δθ|/|θ| per update",
             "lost to rounding at the configured lr", "grad ≠ 0 but bit-identical", "√v̂ below eps"], rows)
    return out


def _show_sweep(sweep: SweepMeasurement) -> dict[str, Figure]:
    lrs, losses = sweep.lrs, sweep.losses
    if not lrs:
        return {}
    summary = sweep_summary(sweep)
    finals = [min(ls[-2:]) if ls else float("nan") for ls in losses]
    lines = {"configured": sweep.configured} if sweep.configured > 0 else {}
    if summary["best_lr"]:
        lines["best"] = summary["best_lr"]
    if summary["diverge_lr"]:
        lines["diverges"] = summary["diverge_lr"]
    start = sweep.initial
    out: dict[str, Figure] = {
        "lr_sweep": Curves(
            f"Learning-rate sweep: {len(losses[0]) - 1 if losses else 0} steps from one start (a short-horizon "
            "measurement)\nit shows where the loss diverges; over so few steps larger rates always look better,\n"
            "so it cannot show that a rate is too small. Diverged runs above the top edge",
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
    refits = list(zip(curve.refit_lrs, curve.refit_losses)) or (
        [(None, curve.best_lr_losses)] if curve.best_lr_losses else [])
    for lr, ls in refits:
        name = f"re-fit at lr {lr:.3g} (plain updates)" if lr is not None else "re-fit at the sweep's best rate"
        series[name] = [list(range(len(ls))), list(ls)]
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
    Step("grad_rule", say="optimisation: the stepped gradient against the loss's", measure=measure_grad_rule,
         judges=(judge_grad_rule, judge_train_mode, judge_zeroing, judge_schedule_steps, judge_clip_order)),
    Step("state_loads", say="optimisation: what build_model loads", measure=measure_state_loads,
         judges=(judge_state_loads,)),
    Step("predictions", needs=("loader",), say="optimisation: stale predictions", measure=_predictions,
         judges=(judge_predictions,)),
    Step("lr_sweep", say="optimisation: learning-rate sweep", measure=measure_lr_sweep,
         judges=(judge_sweep,), show=_show_sweep),
    Step("overfit", say="optimisation: overfit one batch", measure=measure_overfit),
    # The configured rate at the user's horizon: before the re-fit, so that a rate at which nothing
    # can learn counts as a broken connection.
    Step("rates", when=lambda ctx: ctx.result("optimisation.update") is not None or _has_curve(ctx),
         reads=("optimisation.update",), empty_ok=True, timing="",
         judges=(judge(judge_rates, "optimisation.update", "optimisation.overfit", "optimisation.lr_sweep"),)),
    Step("best_lr", when=_has_curve, measure=_best_lr, reads=("optimisation.overfit", PRIOR, "optimisation.lr_sweep"),
         timing=""),
    Step("overfit_best_lr", when=lambda ctx: ctx.result("optimisation.best_lr") is not None,
         say="optimisation: overfit again at the best learning rate", measure=_refit),
    # The verdict names which of the five connections are broken, from everything found so far.
    Step("verdict", when=_has_curve, reads=("optimisation.overfit",), show=_show_overfit,
         judges=(judge(judge_flat_loss, SELF, PRIOR),
                 judge(judge_overfit, SELF, PRIOR, "optimisation.lr_sweep"),
                 judge(judge_curve_stability, SELF, "optimisation.lr_sweep"))),
)))
