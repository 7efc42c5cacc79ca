"""Short human descriptions of stage records and stage differences, shared by every renderer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._describe import describe_diff, fmt  # re-exported: every renderer imports them from here

if TYPE_CHECKING:  # annotations only (cheap to import: the terminal output uses it)
    from ..trace import StageRecord

__all__ = ["fmt", "describe_record", "describe_diff"]


def describe_record(rec: StageRecord) -> str:
    """One line of the numbers that matter for this kind of stage."""
    s = rec.summary
    if rec.kind == "audio":
        a = s.get("audio", {})
        parts = [f"rms {fmt(a.get('rms_dbfs_min'), 3)}…{fmt(a.get('rms_dbfs_max'), 3)} dBFS",
                 f"peak {fmt(a.get('peak'), 3)}",
                 f"silence ≤{fmt(a.get('silence_fraction_max'), 2)}",
                 f"clip ≤{fmt(a.get('clipping_fraction_max'), 2)}"]
        if a.get("sample_rate"):
            parts.append(f"{a['sample_rate']} Hz")
        if a.get("mono_energy_db_min") is not None and rec.shape and len(rec.shape) == 3 and rec.shape[1] > 1:
            parts.append(f"mono/ch {fmt(a['mono_energy_db_min'], 3)} dB")
        if a.get("nonfinite_fraction_max"):
            parts.append(f"non-finite {fmt(a['nonfinite_fraction_max'], 2)}")
        return ", ".join(parts)
    if rec.kind == "text":
        return f"{s.get('count')} texts, {s.get('empty')} empty, {fmt(s.get('words_mean'), 3)} words on average"
    if rec.kind == "json":
        miss = s.get("missing") or {}
        return f"{s.get('count')} records, keys {', '.join(s.get('keys', [])[:8])}" + (
            f"; missing {miss}" if miss else ""
        )
    if rec.kind == "scalar":
        return f"value {fmt(s.get('value'), 6)}"
    if "true_fraction" in s:
        return f"{fmt(s.get('true_fraction'), 3)} true"
    parts = [f"min {fmt(s.get('min'))}", f"max {fmt(s.get('max'))}", f"mean {fmt(s.get('mean'))}",
             f"std {fmt(s.get('std'))}"]
    if "unique" in s:
        parts.append(f"{s['unique']} distinct")
    if s.get("finite_fraction", 1.0) < 1.0:
        parts.append(f"non-finite: {s.get('nan_count')} NaN, {s.get('inf_count')} inf")
    return ", ".join(parts)
