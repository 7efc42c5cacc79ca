"""The doctor's families: which experiments run, and which checks judge them, in what order."""

from __future__ import annotations

from ..checks.audio import check_audio
from ..checks.base import run_check
from ..checks.data import DATA_CHECKS
from ..checks.gradients import judge_gradients, judge_update
from ..checks.stale import judge_loader, judge_predictions, judge_token_audio
from ..checks.tokens import TOKEN_CHECKS
from ..checks.training import judge_curve_stability, judge_overfit, judge_sweep, sweep_summary
from ..findings import Finding
from ..pipeline import capabilities, missing_capability
from .context import Context
from .doctor import family
from .gradients import measure_gradients
from .lr_sweep import measure_lr_sweep
from .overfit import measure_overfit
from .stale import measure_loader, measure_predictions, measure_token_audio
from .update import measure_update

__all__: list[str] = []


@family("audio", "Audio at every stage: silence, clipping, scale, channels, rate")
def audio_family(ctx: Context) -> list[Finding]:
    return run_check("checks.audio", check_audio, ctx.golden().trace)


@family("data", "Data path: batch, crop, tokens, masks, targets, loader, token/audio agreement")
def data_family(ctx: Context) -> list[Finding]:
    trace = ctx.golden().trace
    out: list[Finding] = list(trace.problems)
    for check in DATA_CHECKS + TOKEN_CHECKS:
        out += run_check(f"checks.{check.__name__}", check, trace)
    ctx.say("data: tokens against audio")
    with ctx.timed("data.token_audio"):
        m = measure_token_audio(ctx)
    ctx.metrics["token_audio"] = m
    out += run_check("checks.stale.token_audio", judge_token_audio, m)
    if "loader" in capabilities(ctx.pipeline):
        ctx.say("data: loader")
        with ctx.timed("data.loader"):
            lm = measure_loader(ctx, ctx.fresh_model())
        out += run_check("checks.stale.loader", judge_loader, lm)
    else:
        out.append(missing_capability(ctx.pipeline, "loader", "checks.stale.loader"))  # type: ignore[arg-type]
    return out


@family("optimisation", "Optimisation path: gradients, updates, stale predictions, overfit, learning rate")
def optimisation_family(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    ctx.say("optimisation: gradient reach")
    with ctx.timed("optimisation.gradients"):
        grads = measure_gradients(ctx)
    ctx.metrics["gradients"] = {q.name: q.grad_norm for q in grads.params}
    out += run_check("checks.gradients", judge_gradients, grads, ctx.findings)
    ctx.say("optimisation: parameter update")
    with ctx.timed("optimisation.update"):
        upd = measure_update(ctx)
    ctx.metrics["update"] = upd.layer_ratio
    out += run_check("checks.update", judge_update, upd, {q.name for q in grads.params if q.requires_grad})
    ctx.say("optimisation: stale predictions")
    with ctx.timed("optimisation.predictions"):
        pm = measure_predictions(ctx, ctx.fresh_model()) if "loader" in capabilities(ctx.pipeline) else {}
    out += run_check("checks.stale.predictions", judge_predictions, pm)
    ctx.say("optimisation: learning-rate sweep")
    with ctx.timed("optimisation.lr_sweep"):
        sweep = measure_lr_sweep(ctx)
    ctx.metrics["lr_sweep"] = {"lrs": sweep.lrs, "losses": sweep.losses, "configured": sweep.configured,
                               "probe_lr": sweep.probe_lr, "probe_losses": sweep.probe_losses,
                               "probe_grad_norms": sweep.probe_grad_norms, **sweep_summary(sweep)}
    out += run_check("checks.training.sweep", judge_sweep, sweep)
    ctx.say("optimisation: overfit one batch")
    with ctx.timed("optimisation.overfit"):
        curve = measure_overfit(ctx)
    ctx.metrics["overfit"] = {"losses": curve.losses, "grad_norms": curve.grad_norms,
                              "unigram_entropy": curve.unigram_entropy}
    # The verdict names which of the five connections are broken, from everything found so far.
    out += run_check("checks.training.overfit", judge_overfit, curve, ctx.findings + out, sweep)
    out += run_check("checks.training.stability", judge_curve_stability, curve)
    return out
