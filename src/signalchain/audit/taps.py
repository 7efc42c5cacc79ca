"""Recover normalisation statistics from what a training step tapped.

When a stage maps audio to audio sample by sample with one affine map for the whole batch,
y = a·x + b with (a, b) ≠ (1, 0), the data are being standardised with fitted statistics: the mean
they subtract is m = -b / a. Comparing m with each split's mean says which data it was fitted on.
Per-example maps (instance normalisation) differ between examples and are not fitted statistics.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..trace.vocabulary import is_audio_stage
from .judge_leaks import FittedStats

__all__ = ["AudioTap", "recover_standardisation"]

AFFINE_RESIDUAL = 1e-4  # rms residual / rms output: float32 rounding is ~1e-7
SAME_MAP = 1e-4  # relative spread of the per-example gains that still counts as one map


@dataclass
class AudioTap:
    """One tapped audio stage with its full value (a `StageRecord` of a trace with values fits too)."""

    name: str
    value: Any
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def sample_rate(self) -> int | None:
        sr = self.meta.get("sample_rate")
        return int(sr) if sr else None


def _channel_mean(rec: Any) -> tuple[np.ndarray, list[int]] | None:
    value = rec.value
    if value is None:
        return None
    x = np.asarray(value, dtype=np.float64)
    if x.ndim == 2:
        x = x[:, None, :]
    if x.ndim != 3:
        return None
    lengths = rec.meta.get("lengths")
    n = [int(v) for v in lengths] if lengths is not None and len(lengths) == x.shape[0] else [x.shape[-1]] * x.shape[0]
    return x.mean(axis=1), n


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float] | None:
    """Least squares y ≈ a·x + b: (a, b, relative rms residual)."""
    if x.size < 64 or float(np.std(x)) == 0.0:
        return None
    design = np.stack([x, np.ones_like(x)], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = float(np.sqrt(np.mean((y - a * x - b) ** 2)) / max(float(np.sqrt(np.mean(y * y))), 1e-30))
    return float(a), float(b), resid


def recover_standardisation(records: Iterable[Any]) -> FittedStats | None:
    """The first global affine map between consecutive audio stages of equal length, or None.

    `records`: `AudioTap`s, or the records of a trace recorded with values, in tap order."""
    audio = [r for r in records if is_audio_stage(r.name) and r.value is not None]
    for prev, rec in zip(audio, audio[1:]):
        if prev.sample_rate != rec.sample_rate:
            continue
        px, cx = _channel_mean(prev), _channel_mean(rec)
        if px is None or cx is None or px[0].shape != cx[0].shape or px[1] != cx[1]:
            continue
        fits = [_fit(px[0][i, :n], cx[0][i, :n]) for i, n in enumerate(px[1])]
        fits = [f for f in fits if f is not None]
        if len(fits) < 2 or max(f[2] for f in fits) > AFFINE_RESIDUAL or min(abs(f[0]) for f in fits) == 0:
            continue  # not affine, or too little to tell
        a = np.array([f[0] for f in fits])
        b = np.array([f[1] for f in fits])
        if abs(a.mean() - 1.0) < 1e-6 and np.abs(b).max() < 1e-9:
            continue  # the identity: nothing is normalised here
        m = -b / a
        scale = float(np.std(px[0]))
        if np.ptp(a) > SAME_MAP * abs(a.mean()) or np.ptp(m) > 1e-5 * scale:
            continue  # one map per example: instance normalisation, not fitted statistics
        return FittedStats(source=f"the map {prev.name} → {rec.name}, y = {a.mean():.6g}·x {b.mean():+.6g}",
                           mean=float(m.mean()), std=None,
                           uncertainty=float(np.std(m) / np.sqrt(len(m)) + 1e-12))
    return None
