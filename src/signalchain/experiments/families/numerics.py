"""The numerics and precision families: the first non-finite value, the state, and mixed precision."""

from __future__ import annotations

import math

from ...checks.numerics import judge_numerics
from ...checks.precision import judge_precision
from ...records.figures import Bars, Curves, Figure, Table
from ...records.numerics import NumericsMeasurement
from ...records.precision import AmpMeasurement
from ..context import Knob
from ..doctor import Family, Step, register
from ..numerics.measure import measure_numerics
from ..numerics.precision import measure_precision

__all__: list[str] = []

NUMERICS_KNOBS = {"numerics_steps": Knob(2, 3, 6, "updates watched by the cheap non-finite trigger")}
PRECISION_KNOBS = {"amp_steps": Knob(3, 6, 12, "updates observed under the loss scaler")}


def _finite(xs: list[float | None]) -> list[float]:
    return [x if (x is not None and math.isfinite(x)) else float("nan") for x in xs]


def _numerics_metrics(rep: NumericsMeasurement) -> dict[str, Figure]:
    out: dict[str, Figure] = {}
    loc = rep.locate
    if loc is not None:
        rows = [[e.kind, e.phase, e.op, e.module or "—", e.stage or "—", e.dtype, e.nan, e.inf, e.location or "—"]
                for e in loc.events]
        out["numerics.events"] = Table(f"Ops with non-finite outputs in the replay of update "
                                       f"{rep.trigger_step} (trigger: {rep.trigger})",
                                       ["kind", "phase", "op", "module", "stage", "dtype", "NaN", "inf", "where"], rows)
        out["numerics.stages"] = Table("Non-finite values per tapped stage (replay)",
                                       ["stage", "NaN", "inf", "of", "examples", "only outside the loss mask"],
                                       [[s.name, s.nan, s.inf, s.numel, str(s.examples), s.masked_out_only]
                                        for s in loc.stages if s.nan + s.inf])
    issues = rep.before.issues + (rep.after.issues if rep.after else [])
    if issues:
        out["numerics.state"] = Table("Model and optimizer state",
                                      ["tensor", "where", "problem", "count", "of", "|x| max (finite)"],
                                      [[i.name, i.where, i.problem, i.count, i.numel, i.abs_max] for i in issues])
    return out


def _precision_metrics(rep: AmpMeasurement) -> dict[str, Figure]:
    out: dict[str, Figure] = {}
    if rep.steps and rep.has_scaler:
        xs = list(range(len(rep.steps)))
        out["precision.scale"] = Curves("Loss scale before each update (a fall = a skipped step)",
                                        {"scale": [xs, _finite([s.scale_before for s in rep.steps])]},
                                        x_label="update", y_label="scale", logy=True)
    if rep.steps:
        out["precision.steps"] = Table(f"Updates in {rep.dtype}",
                                       ["update", "scale before", "scale after", "loss", "grad norm", "skipped"],
                                       [[i, s.scale_before, s.scale_after, s.loss, s.grad_norm, s.skipped]
                                        for i, s in enumerate(rep.steps)])
    if rep.stage_errors:
        errs = {k: v for k, v in rep.stage_errors.items() if v > 0}
        if errs:
            out["precision.stages"] = Bars(f"Relative error of each stage, {rep.dtype} vs float32", errs,
                                           x_label="relative RMS error", logx=True)
    return out


register(Family("numerics", "Non-finite values: the first op that makes one, the loss, model and optimizer state",
                after=("data",), knobs=NUMERICS_KNOBS, steps=(
    Step("measure", say="numerics: state scan and watched updates", measure=measure_numerics, isolated=False,
         result="numerics", judges=(judge_numerics,), show=_numerics_metrics),
)))

# The precision family reuses the numerics family's replay of update 0 (`ctx.result("numerics")`).
register(Family("precision", "Mixed precision: skipped steps, loss scale, overflow, low precision against float32",
                after=("numerics", "optimisation"), needs=("amp_dtype|scaler",), needed_by="checks.precision",
                knobs=PRECISION_KNOBS, steps=(
    Step("measure", measure=measure_precision, isolated=False, judges=(judge_precision,), show=_precision_metrics),
)))
