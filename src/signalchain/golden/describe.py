"""One-line descriptions of a stage difference, with the numbers: for `str(Comparison)` and every renderer."""

from __future__ import annotations

from .._describe import describe_diff, fmt
from .compare import Comparison

__all__ = ["fmt", "describe_diff", "describe_comparison"]


def describe_comparison(comparison: Comparison, downstream_shown: int = 8) -> str:
    """A few lines: identical, or the first divergent stage with its numbers and what differs after it."""
    total = len(comparison.stages)
    first = comparison.first_divergence
    if first is None:
        return f"identical: all {total} stages match the golden batch"
    same = sum(s.equal for s in comparison.stages)
    lines = [f"first divergent stage: {first.stage} ({first.kind}): {describe_diff(first)}"]
    later = comparison.downstream
    if later:
        shown = ", ".join(later[:downstream_shown]) + (f", … ({len(later) - downstream_shown} more)"
                                                        if len(later) > downstream_shown else "")
        lines.append(f"downstream ({len(later)}): {shown}")
    lines.append(f"{same} of {total} stages match the golden batch")
    return "\n".join(lines)
