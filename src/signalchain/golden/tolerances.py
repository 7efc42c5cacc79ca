"""Which tolerance each stage of a golden is compared with: per-dtype defaults, overrides, suggestions.

Defaults follow `torch.testing.assert_close` (`rtol`, `atol` by dtype); every other dtype, and every
text or JSON stage, is compared exactly. The order of precedence for a stage, most specific first:
a per-stage override, a suggested tolerance (measured from repeated runs, `suggest_tolerances`),
the caller's global tolerance, the dtype's default. A suggestion is never below the dtype default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import UsageError
from ..trace import StageRecord, Trace
from .compare import Tolerance

__all__ = ["DTYPE_TOLERANCES", "EXACT", "as_tolerance", "dtype_tolerance", "is_exact", "resolve_tolerances",
           "stage_tolerances", "suggest_tolerances"]

EXACT = Tolerance(0.0, 0.0)

# torch.testing.assert_close's defaults, (rtol, atol) by dtype name as traces record it
DTYPE_TOLERANCES: dict[str, Tolerance] = {
    "float16": Tolerance(1e-3, 1e-5),
    "bfloat16": Tolerance(1.6e-2, 1e-5),
    "float32": Tolerance(1.3e-6, 1e-5),
    "float64": Tolerance(1e-7, 1e-7),
    "float": Tolerance(1e-7, 1e-7),  # a Python float is a float64
    "complex32": Tolerance(1e-3, 1e-5),
    "complex64": Tolerance(1.3e-6, 1e-5),
    "complex128": Tolerance(1e-7, 1e-7),
}


def dtype_tolerance(dtype: str) -> Tolerance:
    """The default tolerance for values of `dtype` (`"float16"`, `"int64"`, …); `EXACT` for the rest."""
    return DTYPE_TOLERANCES.get(str(dtype).removeprefix("torch."), EXACT)


def is_exact(rec: StageRecord) -> bool:
    """Whether a stage is compared exactly whatever the tolerance (text, JSON, integers, booleans)."""
    return rec.kind in ("text", "json") or dtype_tolerance(rec.dtype) == EXACT


def as_tolerance(value: Any, where: str) -> Tolerance:
    """A `Tolerance`, or an `(rtol, atol)` pair made into one; anything else is a `UsageError`."""
    if isinstance(value, Tolerance):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return Tolerance(*value)
    raise UsageError(f"{where}: {value!r} is not a tolerance; give Tolerance(rtol, atol) or an (rtol, atol) "
                     "pair, e.g. (1e-3, 1e-5)")


def resolve_tolerances(trace: Trace, overrides: Mapping[str, Any] | None = None, *,
                       default: Any = None, suggested: Mapping[str, Tolerance] | None = None,
                       ) -> dict[str, tuple[Tolerance, str]]:
    """Each stage of `trace` (a golden) → (its tolerance, where it came from).

    `overrides` and `suggested` are per stage, `default` replaces every dtype default. A tolerance
    for a stage the golden lacks, or for a stage compared exactly, is a `UsageError`: it would do
    nothing, silently.
    """
    overrides = {str(k): as_tolerance(v, f"per_stage[{k!r}]") for k, v in (overrides or {}).items()}
    suggested = dict(suggested or {})
    glob = None if default is None else as_tolerance(default, "tol")
    for source, table in (("per_stage", overrides), ("suggested tolerance", suggested)):
        for stage in table:
            rec = trace.get(stage)
            if rec is None:
                raise UsageError(f"{source} for stage {stage!r}, which the golden does not have; its stages: "
                                 f"{', '.join(trace.names())}")
            if is_exact(rec):
                raise UsageError(f"{source} for stage {stage!r}, which is {rec.kind} of {rec.dtype} and is "
                                 "compared exactly; a tolerance applies to float stages only")
    out: dict[str, tuple[Tolerance, str]] = {}
    for rec in trace:
        if is_exact(rec):
            out[rec.name] = (EXACT, f"exact ({rec.dtype})")
        elif rec.name in overrides:
            out[rec.name] = (overrides[rec.name], "per_stage")
        elif rec.name in suggested:
            out[rec.name] = (suggested[rec.name], "suggested")
        elif glob is not None:
            out[rec.name] = (glob, "tol=")
        else:
            out[rec.name] = (dtype_tolerance(rec.dtype), f"{rec.dtype} default")
    return out


def stage_tolerances(trace: Trace, overrides: Mapping[str, Any] | None = None, *, default: Any = None,
                     suggested: Mapping[str, Tolerance] | None = None) -> dict[str, Tolerance]:
    """Each stage of `trace` → its tolerance (see `resolve_tolerances`), ready for `compare_traces(per_stage=)`."""
    resolved = resolve_tolerances(trace, overrides, default=default, suggested=suggested)
    return {stage: tol for stage, (tol, _source) in resolved.items()}


def _same_exact(a: StageRecord, b: StageRecord) -> bool:
    if a.kind in ("text", "json", "scalar"):
        return a.value == b.value
    return bool(np.array_equal(np.asarray(a.value), np.asarray(b.value)))


def _scale(a: StageRecord, b: StageRecord, tol: Tolerance) -> float | None:
    """max |a-b| / (atol + rtol·|a|) over the values: how many default tolerances apart the runs are.

    None when the runs differ in a way no tolerance covers (NaN or infinity at different places).
    """
    va = np.asarray(a.value, dtype=np.complex128 if "complex" in a.dtype else np.float64)
    vb = np.asarray(b.value, dtype=va.dtype)
    finite = np.isfinite(va)
    if not np.array_equal(finite, np.isfinite(vb)) or not np.array_equal(va[~finite], vb[~finite], equal_nan=True):
        return None
    if not finite.any():
        return 0.0
    return float(np.max(np.abs(va - vb)[finite] / (tol.atol + tol.rtol * np.abs(va)[finite])))


def suggest_tolerances(traces: Sequence[Trace], margin: float = 10.0) -> dict[str, Tolerance]:
    """Per float stage, the dtype default scaled to cover the largest deviation of any run from the first.

    The deviation is measured in units of the dtype default (`max |a-b| / (atol + rtol·|a|)`), times
    `margin`, never below 1: deterministic runs get the default back. Runs that disagree on a stage
    compared exactly (tokens, masks, text), or put NaN/infinity in different places, cannot be
    covered by a tolerance: that is a `UsageError` naming the stages (seed the pipeline fully first).
    """
    if len(traces) < 2:
        raise UsageError(f"suggest_tolerances needs at least 2 runs to measure their spread; got {len(traces)}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin < 1:
        raise UsageError(f"margin {margin!r} is not a safety margin: give a finite number >= 1 (e.g. 10)")
    ref = traces[0]
    scales: dict[str, float] = {}
    unstable: list[str] = []
    for i, run in enumerate(traces[1:], start=1):
        if run.names() != ref.names():
            raise UsageError(f"run {i} tapped stages {run.names()}, run 0 tapped {ref.names()}; "
                             "the runs must tap the same stages to be compared")
        for a in ref:
            b = run[a.name]
            if a.value is None or b.value is None:
                raise UsageError(f"stage {a.name!r} was recorded without values; record with values=True")
            if (a.kind, a.dtype, list(a.shape)) != (b.kind, b.dtype, list(b.shape)):
                raise UsageError(f"stage {a.name!r} is {a.kind} {a.dtype} {a.shape} in run 0 but {b.kind} {b.dtype} "
                                 f"{b.shape} in run {i}")
            if is_exact(a):
                if not _same_exact(a, b) and a.name not in unstable:
                    unstable.append(a.name)
                continue
            s = _scale(a, b, dtype_tolerance(a.dtype))
            if s is None:
                if a.name not in unstable:
                    unstable.append(a.name)
                continue
            scales[a.name] = max(scales.get(a.name, 0.0), s)
    if unstable:
        raise UsageError(f"the runs are not reproducible at stage(s) {', '.join(unstable)}: they are compared exactly "
                         "(or differ in NaN/infinity), so no tolerance can cover them; seed every random source "
                         "the pipeline uses, or make those stages deterministic")
    out = {}
    for rec in ref:
        if rec.name in scales:
            base, k = dtype_tolerance(rec.dtype), max(1.0, margin * scales[rec.name])
            out[rec.name] = Tolerance(base.rtol * k, base.atol * k)
    return out
