"""Judge a golden-batch comparison: the first divergent stage is the finding."""

from __future__ import annotations

from ..findings import Finding, Severity
from ..golden.compare import Comparison, StageDiff

__all__ = ["divergence_findings"]


def _summary(d: StageDiff) -> str:
    det = d.detail
    if "reason" in det and det["reason"] != "content changed":
        return det["reason"]
    if "mismatches" in det:
        s = f"{det['mismatches']} values differ"
        if "max_abs_diff" in det:
            s += f", max |Δ| {det['max_abs_diff']:.4g}"
        if "snr_db" in det and isinstance(det["snr_db"], float):
            s += f", SNR {det['snr_db']:.1f} dB"
        return s
    if "golden" in det and "new" in det:
        return f"golden {det['golden']!r}, new {det['new']!r}"
    return "content changed"


def divergence_findings(comparison: Comparison, check: str = "checks.golden") -> list[Finding]:
    first = comparison.first_divergence
    if first is None:
        return []
    return [Finding(
        id="golden.diverged",
        severity=Severity.ERROR,
        stage=first.stage,
        message=f"first divergence from the golden batch at stage {first.stage!r} ({first.kind}): {_summary(first)}",
        evidence={"first_divergence": first.to_dict(), "downstream": comparison.downstream},
        hint=(f"look at the code between the last matching stage and {first.stage!r}; "
              f"{len(comparison.downstream)} later stages differ as a consequence or independently"),
        check=check,
    )]
