"""Judge mixed precision: skipped steps, a collapsing scale, a float16 overflow, low precision that misleads.

A GradScaler skips the optimizer step whenever the scaled gradients are not finite and halves the
scale; a healthy run skips a few steps while the scale settles, then almost never. A run that keeps
skipping trains on nothing. When the gradients are not finite even at scale 1, no scale can help and
the scaler halves it towards zero forever.
"""

from __future__ import annotations

import math

from ..findings import Finding
from ..records.precision import AmpMeasurement
from .base import make
from .numerics_causes import CAUSES, likely_cause, op_name

__all__ = ["judge_precision", "SKIP_ERROR", "SKIP_WARNING"]

CHECK = "checks.precision"
SKIP_ERROR = 0.5  # share of observed steps skipped
SKIP_WARNING = 0.25
MIN_SCALE = 1.0  # below this the scale has collapsed whatever the trend


def _overflow_text(rep: AmpMeasurement) -> str:
    ev = rep.overflow
    if ev is None:
        return ""
    where = f" in {ev.module}" if ev.module else ""
    param = (
        f"; first parameter with a non-finite gradient: {rep.first_overflow_param}" if rep.first_overflow_param else ""
    )
    return (f" First op that overflowed: {op_name(ev.op)}{where}, the gradient of {ev.forward_op} at stage "
            f"{ev.stage} ({ev.nan} NaN, {ev.inf} inf){param}.")


def _skips(rep: AmpMeasurement) -> list[Finding]:
    steps = rep.steps
    n = len(steps)
    skipped = [i for i, s in enumerate(steps) if s.skipped]
    if n < 2 or not skipped:
        return []
    # A few skips at the start while the scale settles are how a GradScaler works.
    settling = skipped == list(range(len(skipped))) and len(skipped) < n and len(skipped) <= 2
    rate = len(skipped) / n
    if settling or rate < SKIP_WARNING:
        return []
    scales = [s.scale_before for s in steps] + [steps[-1].scale_after]
    unscaled = (
        ("finite" if not rep.unscaled_nonfinite else "NOT finite") if rep.unscaled_grad_norm is not None else "unknown"
    )
    moved = sum(1 for s in steps if s.params_moved)
    msg = (f"the gradient scaler skipped {len(skipped)} of {n} optimizer steps ({rate:.0%}); the weights moved in "
           f"{moved} of them; scale {scales[0]:g} -> {scales[-1]:g}; gradients at scale 1 are {unscaled} "
           f"(norm {rep.unscaled_grad_norm if rep.unscaled_grad_norm is not None else 'n/a'}).{_overflow_text(rep)}")
    if rep.unscaled_nonfinite:
        hint = "the gradients are non-finite at any scale: fix the op named above (see the numerics family)"
    else:
        hint = ("the scaled gradients overflow float16: start from a lower init_scale (GradScaler default 2**16) "
                "and keep growth_interval large (default 2000)")
    severity = "error" if rate >= SKIP_ERROR else "warning"
    return [make("amp.steps_skipped", severity, "optimizer", msg, CHECK, hint=hint, skipped=skipped, steps=n,
                 rate=rate, scales=scales, unscaled_grad_norm=rep.unscaled_grad_norm,
                 unscaled_nonfinite=rep.unscaled_nonfinite[:8], first_overflow_param=rep.first_overflow_param,
                 overflow_op=rep.overflow.op if rep.overflow else None)]


def _collapse(rep: AmpMeasurement) -> list[Finding]:
    steps = [s for s in rep.steps if s.scale_before is not None and s.scale_after is not None]
    if len(steps) < 2:
        return []
    halving = all(s.scale_after < s.scale_before for s in steps)
    final = steps[-1].scale_after
    scale_free = bool(rep.unscaled_nonfinite)  # non-finite at scale 1: no scale can ever pass
    if not ((halving and scale_free) or final < MIN_SCALE):
        return []
    forever = "it will keep halving towards 0, " if scale_free else ""
    return [make("amp.scale_collapse", "error", "optimizer",
                 f"the loss scale collapses: {steps[0].scale_before:g} -> {final:g} over {len(steps)} steps, halved "
                 f"at every one; the gradients are non-finite even at scale 1 "
                 f"({len(rep.unscaled_nonfinite)} parameters, e.g. {', '.join(rep.unscaled_nonfinite[:3])}), so "
                 f"{forever}every step is skipped and the run trains on nothing.{_overflow_text(rep)}", CHECK,
                 hint="the scale is not the problem: find the op that makes the gradient NaN (named above) and "
                      "fix it (eps inside a sqrt, a masked division); then check the scale stays near 2**16",
                 scales=[s.scale_before for s in steps] + [final], unscaled_nonfinite=rep.unscaled_nonfinite[:8])]


def _overflow(rep: AmpMeasurement) -> list[Finding]:
    located = rep.forward
    if located is None:
        return []
    ev = next((e for e in located.events if e.kind == "born" and e.phase == "forward"), None)
    if ev is None or ev.dtype not in ("float16", "bfloat16") or not ev.fp32_finite:
        return []
    _, why, hint = likely_cause(ev)
    where = f" in {ev.module}" if ev.module else ""
    at = f" at {ev.location}" if ev.location else ""
    return [make("amp.overflow", "error", ev.stage,
                 f"{op_name(ev.op)}{where}{at} overflows in {ev.dtype} in the forward pass ({ev.inf} inf, {ev.nan} NaN "
                 f"of {ev.numel}) and shows at stage {ev.stage}; the same op in float32 is finite — {why}.", CHECK,
                 hint=hint, op=ev.op, module=ev.module, location=ev.location, dtype=ev.dtype, inputs=ev.inputs,
                 cause=CAUSES["low_precision"])]


def _mismatch(rep: AmpMeasurement) -> list[Finding]:
    stage = rep.first_divergence
    if stage is None:
        return []
    err = rep.stage_errors.get(stage, math.nan)
    tol = rep.stage_tolerance.get(stage, math.nan)
    detail = (rep.comparison or {}).get("first_divergence") or {}
    d = rep.op_divergence
    op = (
        f" The first op out of tolerance: {op_name(d.op)}"
        + (f" in {d.module}" if d.module else "")
        + (f" at {d.location}" if d.location else "")
        + f" ({d.dtype}, relative error {d.rel_error:.3g} > {d.tolerance:.3g})."
        if d
        else ""
    )
    if math.isinf(err) and rep.forward is not None:
        return []  # not finite in low precision: amp.overflow and the numerics family say it better
    severity = "error" if (math.isfinite(err) and err > 4 * tol) else "warning"
    return [make("amp.precision_mismatch", severity, stage,
                 f"in {rep.dtype}, stage {stage} differs from the same batch and weights in float32 by {err:.3g} "
                 f"(relative RMS; tolerance {tol:.3g} = a few {rep.dtype} roundings); every earlier stage agrees.{op}",
                 CHECK, hint="compute this stage (reductions, accumulations, losses) in float32: accumulate sums in "
                             "float32 (x.float().sum()) and keep the loss outside autocast",
                 relative_error=err, tolerance=tol, downstream=(rep.comparison or {}).get("downstream", []),
                 op=d.op if d else None, op_location=d.location if d else None, detail=detail.get("detail"))]


def judge_precision(rep: AmpMeasurement) -> list[Finding]:
    """Findings of a mixed-precision run (none when the pipeline trains in full precision: the family
    says so with `pipeline.capability_missing`)."""
    return _skips(rep) + _collapse(rep) + _overflow(rep) + _mismatch(rep)
