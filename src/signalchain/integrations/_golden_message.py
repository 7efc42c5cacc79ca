"""The assertion message of a golden-batch test: the first divergent stage with its numbers.

Imported only when a test compares (it imports the golden and report machinery).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from ..golden import Comparison, Golden, StageDiff, Tolerance, package_versions
from ..report.describe import describe_diff, fmt

__all__ = ["failure_message", "describe_tolerance", "update_hint"]

_WIDTH = 11  # label column


def update_hint(in_pytest: bool) -> str:
    if in_pytest:
        return "pytest --signalchain-update  (then review and commit the golden folder)"
    return "assert_matches_golden(..., update=True)  (then review and commit the golden folder)"


def describe_tolerance(tol: Tolerance, source: str) -> str:
    if source.startswith("exact"):
        return source
    return f"rtol {fmt(tol.rtol, 3)}, atol {fmt(tol.atol, 3)} ({source})"


def _line(label: str, text: str) -> str:
    return f"  {label:<{_WIDTH}}{text}"


def _numbers(diff: StageDiff, size: int | None) -> list[tuple[str, str]]:
    """(label, text) rows for the numbers of one divergent stage (`size`: how many values it has)."""
    d = diff.detail
    if "mismatches" not in d:  # shape/dtype/kind changed, text, json, scalar, summary-only
        return [("difference", describe_diff(diff))]
    of = f" of {size}" if size else ""
    rows = [("values", f"{d['mismatches']}{of} differ ({fmt(100 * d.get('fraction', 0.0), 3)}%)")]
    if "first_index" in d:
        rows.append(("first at", f"{d['first_index']}: golden {fmt(d.get('golden_value'), 6)} → "
                                 f"new {fmt(d.get('new_value'), 6)}"))
    if "max_abs_diff" in d:
        rows.append(("max |Δ|", f"{fmt(d['max_abs_diff'])} (max relative {fmt(d.get('max_rel_diff'))})"))
    if "snr_db" in d:
        rows.append(("SNR", f"{fmt(d['snr_db'], 3)} dB (difference against the golden audio)"))
    if "nonfinite_new" in d:
        rows.append(("non-finite", f"golden {d['nonfinite_golden']}, new {d['nonfinite_new']}"))
    return rows


def _provenance(golden: Golden) -> str:
    prov = golden.provenance or {}
    parts = [f"seed {prov.get('seed')}", f"captured {prov.get('created', '?')}"]
    git = prov.get("git") or {}
    if git.get("commit"):
        parts.append(f"commit {str(git['commit'])[:10]}" + (" (dirty)" if git.get("dirty") else ""))
    return ", ".join(parts)


def _version_notes(golden: Golden) -> list[str]:
    """Package versions that changed since capture: the usual reason float stages drift a little."""
    then = (golden.provenance or {}).get("packages") or {}
    now = package_versions()
    return [f"{pkg} {then[pkg]} at capture, {now[pkg]} now" for pkg in ("torch", "numpy")
            if isinstance(then, dict) and pkg in then and pkg in now and then[pkg] != now[pkg]]


def failure_message(comparison: Comparison, golden: Golden, tolerances: Mapping[str, tuple[Tolerance, str]],
                    *, pipeline: str, in_pytest: bool, folder: Path) -> str:
    first = comparison.first_divergence
    assert first is not None
    names = [s.stage for s in comparison.stages]
    at = names.index(first.stage)
    rec = golden.trace.get(first.stage)
    dtype = f", {rec.dtype}" if rec is not None else ""
    failing = sum(not s.equal for s in comparison.stages)
    lines = [f"golden batch mismatch: first divergent stage {first.stage!r} ({first.kind}{dtype}), "
             f"{failing} of {len(names)} stages differ",
             _line("golden", f"{folder} ({_provenance(golden)})"),
             _line("pipeline", pipeline)]
    size = math.prod(rec.shape) if rec is not None and rec.shape else None
    lines += [_line(label, text) for label, text in _numbers(first, size)]
    if first.stage in tolerances:
        lines.append(_line("tolerance", describe_tolerance(*tolerances[first.stage])))
    lines.append(_line("last match", names[at - 1] if at > 0 else "none (the very first stage differs)"))
    down = comparison.downstream
    lines.append(_line("downstream", ", ".join(down) if down else "none (every later stage matches)"))
    for note in _version_notes(golden):
        lines.append(_line("note", note))
    lines.append(f"Look at the code between {names[at - 1]!r} and {first.stage!r}. " if at > 0 else "")
    lines[-1] += f"If the change is intended, refresh the golden: {update_hint(in_pytest)}"
    return "\n".join(lines)

