"""Compare two traces stage by stage and name the first stage where they part (DESIGN §5).

Rules per kind: integers, booleans, text and JSON must be equal exactly; floats within
`rtol`/`atol` (per-stage overrides), with NaN equal to NaN at the same place; audio also reports
the SNR of the difference. When a trace holds only summaries, content hashes (exact kinds) or
summary statistics (floats) are compared instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import UsageError
from ..findings import jsonable
from ..trace import StageRecord, Trace

__all__ = ["Tolerance", "StageDiff", "Comparison", "compare_traces", "compare_records"]


@dataclass(frozen=True)
class Tolerance:
    """`|a - b| <= atol + rtol * |a|`; both finite and non-negative (a NaN or negative one would
    turn every comparison into a false divergence, or a false match)."""

    rtol: float = 1e-5
    atol: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise UsageError(f"{name} {value!r} is not a tolerance: give a finite number >= 0 (e.g. 1e-5)")


@dataclass
class StageDiff:
    stage: str
    kind: str
    equal: bool
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "kind": self.kind, "equal": self.equal, "detail": jsonable(self.detail)}


@dataclass
class Comparison:
    """Two traces compared stage by stage (`compare_traces`): `identical`, the `first_divergence` and the
    stages that differ after it (`downstream`); `str()` says it in a few lines, `to_dict()` is the JSON."""

    stages: list[StageDiff]

    @property
    def identical(self) -> bool:
        return all(s.equal for s in self.stages)

    @property
    def first_divergence(self) -> StageDiff | None:
        return next((s for s in self.stages if not s.equal), None)

    @property
    def downstream(self) -> list[str]:
        first = self.first_divergence
        if first is None:
            return []
        seen = False
        out = []
        for s in self.stages:
            if s is first:
                seen = True
            elif seen and not s.equal:
                out.append(s.stage)
        return out

    def __str__(self) -> str:
        """'identical: …', or the first divergent stage with its numbers, then the stages after it."""
        from .describe import describe_comparison  # describe.py reads this module

        return describe_comparison(self)

    def to_dict(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "identical": self.identical,
            "first_divergence": None
            if first is None
            else {"stage": first.stage, "kind": first.kind, "detail": jsonable(first.detail)},
            "downstream": self.downstream,
            "stages": [s.to_dict() for s in self.stages],
        }


def _first_index(mask: np.ndarray) -> list[int] | None:
    idx = np.argwhere(mask)
    return [int(i) for i in idx[0]] if idx.size else None


def _exact_arrays(a: np.ndarray, b: np.ndarray) -> dict[str, Any] | None:
    diff = a != b
    n = int(diff.sum())
    if n == 0:
        return None
    first = _first_index(diff)
    return {"mismatches": n, "fraction": n / a.size, "first_index": first,
            "golden_value": jsonable(a[tuple(first)]), "new_value": jsonable(b[tuple(first)])}


def _float_arrays(a: np.ndarray, b: np.ndarray, tol: Tolerance, audio: bool) -> tuple[bool, dict[str, Any]]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same_nan = np.isnan(a64) == np.isnan(b64)
    both_finite = np.isfinite(a64) & np.isfinite(b64)
    same_inf = np.where(np.isinf(a64) | np.isinf(b64), a64 == b64, True)
    close = np.where(both_finite, np.abs(a64 - b64) <= tol.atol + tol.rtol * np.abs(a64), same_nan & same_inf)
    detail: dict[str, Any] = {"rtol": tol.rtol, "atol": tol.atol}
    if both_finite.any():
        d = np.abs(a64 - b64)[both_finite]
        detail["max_abs_diff"] = float(d.max())
        ref = np.abs(a64)[both_finite]
        detail["max_rel_diff"] = float((d / np.maximum(ref, 1e-12)).max())
    bad = ~close
    n_bad = int(bad.sum())
    detail["mismatches"] = n_bad
    detail["fraction"] = n_bad / a.size if a.size else 0.0
    if n_bad:
        first = _first_index(bad)
        detail["first_index"] = first
        detail["golden_value"] = jsonable(float(a64[tuple(first)]))
        detail["new_value"] = jsonable(float(b64[tuple(first)]))
    nonfinite_a, nonfinite_b = int((~np.isfinite(a64)).sum()), int((~np.isfinite(b64)).sum())
    if nonfinite_a or nonfinite_b:
        detail["nonfinite_golden"], detail["nonfinite_new"] = nonfinite_a, nonfinite_b
    if audio and both_finite.any():
        sig = float(np.sum(a64[both_finite] ** 2))
        noise = float(np.sum((a64 - b64)[both_finite] ** 2))
        detail["snr_db"] = math.inf if noise == 0 else (10 * math.log10(sig / noise) if sig > 0 else -math.inf)
    return n_bad == 0, detail


def _summary_floats(a: StageRecord, b: StageRecord, tol: Tolerance) -> tuple[bool, dict[str, Any]]:
    keys = ("min", "max", "mean", "std", "finite_fraction")
    detail: dict[str, Any] = {"compared": "summary"}
    equal = True
    for k in keys:
        va, vb = a.summary.get(k), b.summary.get(k)
        if va is None and vb is None:
            continue
        if va is None or vb is None or abs(float(va) - float(vb)) > tol.atol + tol.rtol * abs(float(va)):
            equal = False
            detail[k] = {"golden": va, "new": vb}
    return equal, detail


def compare_records(a: StageRecord, b: StageRecord, tol: Tolerance = Tolerance()) -> StageDiff:
    """Compare one stage of the golden trace (`a`) with the same stage of a new trace (`b`)."""
    name = a.name
    if a.kind != b.kind:
        return StageDiff(name, a.kind, False, {"reason": "kind changed", "golden": a.kind, "new": b.kind})
    if list(a.shape) != list(b.shape):
        return StageDiff(name, a.kind, False, {"reason": "shape changed", "golden": a.shape, "new": b.shape})
    if a.dtype != b.dtype:
        return StageDiff(name, a.kind, False, {"reason": "dtype changed", "golden": a.dtype, "new": b.dtype})
    if a.kind in ("text", "json"):
        if a.value is not None and b.value is not None:
            if a.value == b.value:
                return StageDiff(name, a.kind, True)
            detail: dict[str, Any] = {"reason": "content changed"}
            if isinstance(a.value, list) and isinstance(b.value, list):
                i = next((i for i, (x, y) in enumerate(zip(a.value, b.value)) if x != y), None)
                if i is not None:
                    detail.update(index=i, golden=a.value[i], new=b.value[i])
            return StageDiff(name, a.kind, False, detail)
        same = a.summary.get("hash") == b.summary.get("hash")
        return StageDiff(name, a.kind, same, {} if same else {"reason": "content hash changed"})
    if a.kind == "scalar":
        va, vb = a.summary.get("value"), b.summary.get("value")
        va = float(a.value) if a.value is not None else float(va)
        vb = float(b.value) if b.value is not None else float(vb)
        if math.isnan(va) and math.isnan(vb):
            return StageDiff(name, a.kind, True)
        ok = va == vb or (math.isfinite(va) and math.isfinite(vb) and abs(va - vb) <= tol.atol + tol.rtol * abs(va))
        return StageDiff(
            name, a.kind, ok, {"golden": va, "new": vb, "abs_diff": abs(va - vb) if math.isfinite(va - vb) else None}
        )
    # tensor / audio
    if a.value is None or b.value is None:
        if a.summary.get("hash") == b.summary.get("hash"):
            return StageDiff(name, a.kind, True)
        if np.issubdtype(np.dtype(a.summary.get("dtype", "float32")), np.floating):
            ok, detail = _summary_floats(a, b, tol)
            return StageDiff(name, a.kind, ok, detail)
        return StageDiff(name, a.kind, False, {"reason": "content hash changed", "compared": "summary"})
    va, vb = np.asarray(a.value), np.asarray(b.value)
    if np.issubdtype(va.dtype, np.floating):
        ok, detail = _float_arrays(va, vb, tol, audio=a.kind == "audio")
        return StageDiff(name, a.kind, ok, detail)
    exact = _exact_arrays(va, vb)
    return StageDiff(name, a.kind, exact is None, exact or {})


def compare_traces(golden: Trace, new: Trace, tolerance: Tolerance = Tolerance(),
                   per_stage: Mapping[str, Tolerance] | None = None) -> Comparison:
    """Align by stage name in the golden's order; stages missing from `new` diverge, extra ones are listed.

    A per-stage tolerance for a stage the golden does not have is refused (it would silently do nothing).
    """
    per_stage = dict(per_stage or {})
    unknown = [s for s in per_stage if s not in golden]
    if unknown:
        raise UsageError(f"tolerance for stage {unknown[0]!r}, which the golden does not have; its stages: "
                         f"{', '.join(golden.names())}")
    diffs: list[StageDiff] = []
    for rec in golden:
        other = new.get(rec.name)
        if other is None:
            diffs.append(StageDiff(rec.name, rec.kind, False, {"reason": "stage missing from the new run"}))
            continue
        diffs.append(compare_records(rec, other, per_stage.get(rec.name, tolerance)))
    # A stage only the new run has goes right after the stage that precedes it in the new run.
    previous: str | None = None
    for rec in new:
        if rec.name not in golden:
            at = 0 if previous is None else next(i for i, d in enumerate(diffs) if d.stage == previous) + 1
            diffs.insert(at, StageDiff(rec.name, rec.kind, False, {"reason": "stage is new (not in the golden)"}))
        previous = rec.name
    return Comparison(diffs)
