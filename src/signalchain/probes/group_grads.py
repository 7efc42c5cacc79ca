"""`GroupGrads`: the gradient norm of each optimizer param group when `step()` runs, as the update
sees it (after the pipeline's own unscaling and clipping), for a step the probe does not own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .base import Probe

__all__ = ["GroupGrads"]


class GroupGrads(Probe):
    """`with GroupGrads(optimizer).attached_to() as probe:` around one update; `probe.norms` holds
    the 2-norm of each group's gradients (float32; inf/nan when one is not finite; 0.0 for a group
    without gradients) at the first `step()` call, or None when `step()` never ran."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        super().__init__()
        self.optimizer = optimizer
        self.norms: list[float] | None = None

    def _pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.norms is not None:  # a second step() in the same update: keep the first
            return
        norms = []
        for group in opt.param_groups:
            grads = [q.grad.detach().float() for q in group["params"] if q.grad is not None]
            norms.append(float(torch.stack(torch._foreach_norm(grads)).norm()) if grads else 0.0)
        self.norms = norms

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[GroupGrads]:
        """Hook the optimizer's step for the block; the handle is removed on exit."""
        with self.attached():
            self.hook(self.optimizer.register_step_pre_hook(self._pre_step))
            yield self
