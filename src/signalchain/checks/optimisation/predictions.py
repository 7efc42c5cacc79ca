"""Judge stale predictions: two different batches that get identical logits from the same model."""

from __future__ import annotations

from typing import Any

from ...findings import Finding
from ..base import make

__all__ = ["judge_predictions"]

CHECK = "checks.stale"  # the name these findings have always carried


def judge_predictions(m: dict[str, Any]) -> list[Finding]:
    g, o = m.get("golden", {}), m.get("other", {})
    if not g.get("logits") or not o.get("logits"):
        return []
    if g["logits"] == o["logits"] and g.get("tokens") != o.get("tokens"):
        return [make("loss.stale_predictions", "error", "logits",
                     "two different batches (different tokens) get identical logits from the same model", CHECK,
                     hint="predictions are cached or reused across steps: the loss is computed on stale logits")]
    return []
