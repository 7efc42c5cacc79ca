"""The doctor's core families: audio, data path and optimisation path."""

from __future__ import annotations

from ...checks.audio import judge_audio
from ...checks.base import run_check
from ...checks.data import DATA_CHECKS
from ...checks.inputs import judge_target_leak
from ...checks.loader import judge_loader
from ...checks.optimisation.curves import (
    judge_curve_stability,
    judge_overfit,
    judge_sweep,
    needs_refit,
    sweep_summary,
)
from ...checks.optimisation.gradients import judge_gradients, judge_update
from ...checks.optimisation.predictions import judge_predictions
from ...checks.token_audio import judge_token_audio
from ...checks.tokens import TOKEN_CHECKS
from ...findings import Finding
from ...pipeline import capabilities, missing_capability
from ..context import Context
from ..data import measure_loader, measure_token_audio
from ..doctor import family
from ..inputs import measure_model_inputs
from ..optimisation.gradients import measure_gradients
from ..optimisation.lr_sweep import measure_lr_sweep
from ..optimisation.overfit import measure_overfit, overfit_at
from ..optimisation.predictions import measure_predictions
from ..optimisation.update import measure_update

__all__: list[str] = []


@family("audio", "Audio at every stage: silence, clipping, scale, channels, rate")
def audio_family(ctx: Context) -> list[Finding]:
    return run_check("checks.audio", judge_audio, ctx.golden().trace)


@family("data", "Data path: batch, crop, tokens, masks, targets, loader, token/audio agreement")
def data_family(ctx: Context) -> list[Finding]:
    trace = ctx.golden().trace
    out: list[Finding] = list(trace.problems)
    for check in DATA_CHECKS + TOKEN_CHECKS:
        out += run_check(f"checks.{check.__name__}", check, trace)
    ctx.say("data: what the model is fed")
    fed, crashed = ctx.attempt("data.model_inputs", measure_model_inputs, ctx)
    out += crashed + run_check("checks.inputs.target_leak", judge_target_leak, trace, fed)
    ctx.say("data: tokens against audio")
    m, crashed = ctx.attempt("data.token_audio", measure_token_audio, ctx)
    ctx.metrics["token_audio"] = m
    out += crashed + run_check("checks.stale.token_audio", judge_token_audio, m)
    if "loader" in capabilities(ctx.pipeline):
        ctx.say("data: loader")
        lm, crashed = ctx.attempt("data.loader", measure_loader, ctx, ctx.fresh_model())
        out += crashed + (run_check("checks.stale.loader", judge_loader, lm) if lm else [])
    else:
        out.append(missing_capability(ctx.pipeline, "loader", "checks.stale.loader"))  # type: ignore[arg-type]
    return out


@family("optimisation", "Optimisation path: gradients, updates, stale predictions, overfit, learning rate")
def optimisation_family(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    ctx.say("optimisation: gradient reach")
    grads, crashed = ctx.attempt("optimisation.gradients", measure_gradients, ctx)
    out += crashed
    if grads is not None:
        ctx.metrics["gradients"] = {q.name: q.grad_norm for q in grads.params}
        out += run_check("checks.gradients", judge_gradients, grads, ctx.findings)
    ctx.say("optimisation: parameter update")
    upd, crashed = ctx.attempt("optimisation.update", measure_update, ctx)
    out += crashed
    if upd is not None:
        ctx.metrics["update"] = upd.layer_ratio
        trainable = {q.name for q in grads.params if q.requires_grad} if grads is not None else None
        out += run_check("checks.update", judge_update, upd, trainable)
    if "loader" in capabilities(ctx.pipeline):
        ctx.say("optimisation: stale predictions")
        pm, crashed = ctx.attempt("optimisation.predictions", measure_predictions, ctx, ctx.fresh_model())
        out += crashed + (run_check("checks.stale.predictions", judge_predictions, pm) if pm else [])
    ctx.say("optimisation: learning-rate sweep")
    sweep, crashed = ctx.attempt("optimisation.lr_sweep", measure_lr_sweep, ctx)
    out += crashed
    if sweep is not None:
        ctx.metrics["lr_sweep"] = {"lrs": sweep.lrs, "losses": sweep.losses, "configured": sweep.configured,
                                   "probe_lr": sweep.probe_lr, "probe_losses": sweep.probe_losses,
                                   "probe_grad_norms": sweep.probe_grad_norms, **sweep_summary(sweep)}
        out += run_check("checks.training.sweep", judge_sweep, sweep)
    ctx.say("optimisation: overfit one batch")
    curve, crashed = ctx.attempt("optimisation.overfit", measure_overfit, ctx)
    out += crashed
    if curve is None:
        return out
    prior = ctx.findings + out
    best = needs_refit(curve, prior, sweep)
    if best is not None:
        # Every connection holds but the rate is far from the sweep's best: fit again at the best
        # rate before blaming either the rate or the model's capacity.
        ctx.say("optimisation: overfit again at the best learning rate")
        refit, crashed = ctx.attempt("optimisation.overfit_best_lr", overfit_at, ctx, best)
        out += crashed
        curve.best_lr_losses = refit or []
    ctx.metrics["overfit"] = {"losses": curve.losses, "grad_norms": curve.grad_norms,
                              "unigram_entropy": curve.unigram_entropy, "best_lr_losses": curve.best_lr_losses}
    # The verdict names which of the five connections are broken, from everything found so far.
    out += run_check("checks.training.overfit", judge_overfit, curve, prior, sweep)
    out += run_check("checks.training.stability", judge_curve_stability, curve, sweep)
    return out
