"""`StepProbe`: what one update shows for almost nothing, the way the Monitor watches a user's loop.

The tapped loss and grad norm, the gradients' finiteness right before the optimizer step, the first
tapped float value holding a NaN (a `nan_to_num` on the loss, or a clipped NaN gradient, hides the
source from the loss and the gradients, not from the taps upstream of them), and (read by the
caller) the scale: a falling scale is a skipped step.
"""

from __future__ import annotations

from typing import Any

import torch

from .._tensor import as_float
from .base import Probe

__all__ = ["StepProbe"]


class StepProbe(Probe):
    """Pass `probe.tap` to one update; read `loss`, `grad_norm`, `grads_finite`, `nan_stage`; `close()` after."""

    def __init__(self, optimizer: Any):
        super().__init__()
        self.loss: float | None = None
        self.grad_norm: float | None = None
        self.grads_finite: bool | None = None
        self.nan_stage: str | None = None  # the first tapped floating tensor holding a NaN
        self.hook(optimizer.register_step_pre_hook(self._pre_step))
        self.tap = self.tap_wrapper()

    def on_tap(self, stage: str, value: Any) -> None:
        # NaN only: -inf is a masking convention (masked_fill before a softmax), NaN never is
        if self.nan_stage is None and isinstance(value, torch.Tensor) and value.is_floating_point():
            with torch.no_grad():
                if bool(torch.isnan(value.detach()).any()):
                    self.nan_stage = stage
        if stage in ("loss", "grad.norm"):
            v = as_float(value, None)
            if v is None:
                return
            if stage == "loss" and self.loss is None:
                self.loss = v
            elif stage == "grad.norm":
                self.grad_norm = v

    def _pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        grads = [q.grad for g in optimizer.param_groups for q in g["params"] if q.grad is not None]
        if grads:
            norms = torch._foreach_norm(grads)
            self.grads_finite = bool(torch.isfinite(torch.stack(norms).sum()))

    def close(self) -> None:
        self.remove_handles()
