"""Numbers and stage differences in words, for people (no numpy or torch: the terminal output uses it).
`golden.describe` and every renderer import these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .golden.compare import StageDiff

__all__ = ["fmt", "describe_diff"]


def fmt(v: Any, digits: int = 4) -> str:
    """A number for people: `digits` significant digits, None as '—'."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v)
        return f"{v:.{digits}g}"
    return str(v)


def describe_diff(diff: StageDiff) -> str:
    """What differs at a stage, with the numbers."""
    d = diff.detail
    if diff.equal:
        return "same"
    if "reason" in d and d["reason"] != "content changed":
        extra = f": golden {d['golden']!r}, new {d['new']!r}" if "golden" in d and "new" in d else ""
        return d["reason"] + extra
    if diff.kind in ("text", "json"):
        if "index" in d:
            return f"example {d['index']} differs: golden {d['golden']!r}, new {d['new']!r}"
        return "content changed"
    if diff.kind == "scalar":
        return f"golden {fmt(d.get('golden'), 8)}, new {fmt(d.get('new'), 8)} (|Δ| {fmt(d.get('abs_diff'))})"
    if d.get("compared") == "summary":
        keys = [k for k in d if k != "compared"]
        return (
            "summary differs: " + ", ".join(f"{k} {fmt(d[k]['golden'])}→{fmt(d[k]['new'])}" for k in keys)
            if keys
            else "content hash changed"
        )
    parts = [f"{d.get('mismatches')} values differ ({fmt(100 * d.get('fraction', 0), 3)}%)"]
    if "first_index" in d:
        parts.append(f"first at {d['first_index']}: {fmt(d.get('golden_value'))} → {fmt(d.get('new_value'))}")
    if "max_abs_diff" in d:
        parts.append(f"max |Δ| {fmt(d['max_abs_diff'])}")
    if "snr_db" in d:
        parts.append(f"SNR {fmt(d['snr_db'], 3)} dB")
    if "nonfinite_new" in d:
        parts.append(f"non-finite golden {d['nonfinite_golden']} / new {d['nonfinite_new']}")
    return ", ".join(parts)
