"""`StageWatch`: each tapped value of a replayed step, finite or not, where and in which batch rows.

It rides on `NonFiniteWatch`'s tap wrapper, so a NaN born in numpy code (which no torch hook sees)
is still placed at the first stage that shows it; boolean masks are kept for the loss-mask rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..records.numerics import StageStatus
from .base import Probe

__all__ = ["StageWatch"]


class StageWatch(Probe):
    """Each tapped value: finite or not, where, per batch row; boolean masks kept for the loss-mask rule.

    Called with `(stage, value, order)` by `NonFiniteWatch.tap_wrapper` (already paused there)."""

    def __init__(self, phase: Callable[[], str] | None = None) -> None:
        super().__init__()
        self.phase = phase
        self.stages: list[StageStatus] = []
        self.masks: dict[str, np.ndarray] = {}
        self._bad: dict[str, np.ndarray] = {}  # stage -> bool array of non-finite positions
        self._counts: dict[str, int] = {}

    def __call__(self, stage: str, value: Any, order: int) -> None:
        self.taps += 1
        n = self._counts.get(stage, 0)
        self._counts[stage] = n + 1
        name = stage if n == 0 else f"{stage}#{n}"
        x = _as_tensor(value)
        st = StageStatus(name=name, order=order, kind="other", phase=self.phase() if self.phase else "forward")
        self.stages.append(st)
        if x is None:
            return
        if x.dtype == torch.bool:
            self.masks[name] = x.cpu().numpy().copy()
            return
        if not x.is_floating_point():
            return
        st.kind, st.numel = "float", x.numel()
        if x.numel() == 0:
            return
        finite = bool(torch.isfinite(x.sum(dtype=torch.float32)))
        if not finite:
            ok = torch.isfinite(x)
            st.nan, st.inf = int(torch.isnan(x).sum()), int(torch.isinf(x).sum())
            finite = (st.nan + st.inf) == 0
            if not finite:
                self._bad[name] = (~ok).cpu().numpy()
                if x.dim() >= 1:
                    rows = (~ok).reshape(x.shape[0], -1)
                    st.examples = [int(i) for i in torch.nonzero(rows.any(1)).flatten()[:16]]
                    st.all_bad_examples = [int(i) for i in torch.nonzero(rows.all(1)).flatten()[:16]]
                vals = x[ok].float()
                if vals.numel():
                    st.stats = {"min": float(vals.min()), "max": float(vals.max()), "abs_max": float(vals.abs().max())}
        if x.dim() >= 2:
            a = x.detach().float().abs()
            if not finite:
                a = torch.where(torch.isfinite(a), a, torch.zeros((), dtype=a.dtype))
            st.row_abs_max = [float(v) for v in a.reshape(x.shape[0], -1).amax(1)[:64]]

    def judge_masks(self, loss_mask: np.ndarray | None) -> None:
        """Non-finite values only where the loss mask is False are deliberate (AudioCraft fills them)."""
        mask = self.masks.get("mask.loss", loss_mask)
        if mask is None:
            return
        for st in self.stages:
            bad = self._bad.get(st.name)
            if bad is None or bad.ndim < mask.ndim or tuple(bad.shape[: mask.ndim]) != tuple(mask.shape):
                continue
            under = bad.reshape(*mask.shape, -1).any(-1) & mask.astype(bool)
            st.masked_out_only = not bool(under.any())


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach()  # checked where it lives; only masks and bad positions come to the host
    if isinstance(value, np.ndarray) and value.dtype.kind in "fb":
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float64)
    return None
