"""Targets visible in the model's inputs: the input at position t must not be the target at t."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..findings import Finding
from ..trace import Trace
from ..trace.layout import read_layout
from .base import make

__all__ = ["judge_target_leak"]

CHECK = "checks.inputs"
COPIES = 0.9  # share of counted positions where the input equals its own target


def _candidates(ids: np.ndarray, b: int, k: int, t: int) -> list[tuple[int | None, np.ndarray]]:
    """(codebook or None for all, ids laid as [B, K', T']) for the layouts an embedding input may have."""
    if ids.shape == (b, k, t):
        return [(None, ids)]
    if ids.shape == (b * k, t):
        return [(None, ids.reshape(b, k, t))]
    if ids.shape == (b, t):
        return [(c, ids[:, None, :]) for c in range(k)]
    return []


def judge_target_leak(trace: Trace, inputs: list[dict[str, Any]] | None) -> list[Finding]:
    """For every embedding input laid out like the targets, compare it with the targets at the same
    position and one position earlier, over the positions the loss counts. Correctly shifted inputs
    agree best one position back; inputs that agree best at the same position are the targets."""
    view = read_layout(trace)
    if not inputs or view.targets is None:
        return []
    targets = view.targets
    mask = view.mask if view.mask is not None else np.ones(targets.shape, bool)
    b, k, t = targets.shape
    worst: tuple[float, float, str, int | None] | None = None
    for entry in inputs:
        for codebook, ids in _candidates(entry["ids"], b, k, t):
            tg = targets if codebook is None else targets[:, codebook : codebook + 1]
            m = mask if codebook is None else mask[:, codebook : codebook + 1]
            now = m & (ids == tg)
            back = (m[..., 1:]) & (ids[..., 1:] == tg[..., :-1])
            n_now, n_back = int(m.sum()), int(m[..., 1:].sum())
            if n_now == 0 or n_back == 0:
                continue
            same, previous = float(now.sum() / n_now), float(back.sum() / n_back)
            if same >= COPIES and same > previous and (worst is None or same > worst[0]):
                worst = (same, previous, entry["module"], codebook)
    if worst is None:
        return []
    same, previous, module, codebook = worst
    where = f"`{module}`" + (f" (codebook {codebook})" if codebook is not None else "")
    return [make("targets.misaligned", "error", "targets",
                 f"the model is fed its own targets: the ids entering {where} equal the target at the same "
                 f"position in {100 * same:.1f}% of the positions the loss counts (one position earlier: "
                 f"{100 * previous:.1f}%)", CHECK,
                 hint="the decoder inputs are not shifted behind the start token (e.g. decoder_input_ids=labels); "
                      "let the model shift the labels itself, or shift them right by one: the loss looks too good "
                      "because the model only copies", module=module, codebook=codebook, same_position=same,
                 previous_position=previous, layout=view.describe())]
