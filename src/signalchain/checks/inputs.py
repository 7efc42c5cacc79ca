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
COPIES = 0.9  # share of counted positions where the input equals a target
MAX_LAG = 3  # input lags tried: 1 is right (shifted behind the start token), 0 is a copy


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
    worst: tuple[float, float, str, int | None, int] | None = None
    for entry in inputs:
        for codebook, ids in _candidates(entry["ids"], b, k, t):
            tg = targets if codebook is None else targets[:, codebook : codebook + 1]
            m = mask if codebook is None else mask[:, codebook : codebook + 1]
            agree = {s: _agreement(ids, tg, m, s) for s in range(0, MAX_LAG + 1)}
            if agree[1] is None:
                continue
            lag = max((s for s in agree if agree[s] is not None), key=lambda s: agree[s])
            best = agree[lag]
            if lag != 1 and best >= COPIES and best > agree[1] and (worst is None or best > worst[0]):
                worst = (best, agree[1], entry["module"], codebook, lag)
    if worst is None:
        return []
    same, previous, module, codebook, lag = worst
    where = f"`{module}`" + (f" (codebook {codebook})" if codebook is not None else "")
    if lag == 0:
        what = (f"the model is fed its own targets: the ids entering {where} equal the target at the same "
                f"position in {100 * same:.1f}% of the positions the loss counts (one position earlier: "
                f"{100 * previous:.1f}%)")
        hint = ("the decoder inputs are not shifted behind the start token (e.g. decoder_input_ids=labels); let the "
                "model shift the labels itself, or shift them right by one: the loss looks too good because the "
                "model only copies")
    else:
        what = (f"the ids entering {where} equal the target {lag} positions earlier in {100 * same:.1f}% of the "
                f"positions the loss counts, and the one just before in only {100 * previous:.1f}%: the inputs are "
                f"shifted {lag} times, so the model predicts {lag - 1} step(s) too far ahead")
        hint = "shift the decoder inputs once (HF does it itself from the labels: do not shift them beforehand)"
    return [make("targets.misaligned", "error", "targets", what, CHECK, hint=hint, module=module, codebook=codebook,
                 same_position=same if lag == 0 else None, previous_position=previous, input_lag=lag,
                 agreement=same, layout=view.describe())]


def _agreement(ids: np.ndarray, tg: np.ndarray, m: np.ndarray, lag: int) -> float | None:
    """Share of counted positions t where the input at t is the target at t - lag."""
    a, b, w = (ids, tg, m) if lag == 0 else (ids[..., lag:], tg[..., :-lag], m[..., lag:])
    n = int(w.sum())
    return float(((a == b) & w).sum() / n) if n else None
