"""`StepGrads`: what the optimizer sees when `step()` runs: how many of its parameters hold a
non-zero gradient (gradients cleared before this point are lost to the update)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .base import Probe

__all__ = ["StepGrads"]


class StepGrads(Probe):
    """`with StepGrads(optimizer).attached_to() as probe:` around some updates; `probe.at_step` holds,
    per `step()` call, {"with_grad": parameters with a non-zero gradient, "params": all of them}."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        super().__init__()
        self.optimizer = optimizer
        self.at_step: list[dict[str, int]] = []

    def _pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        seen = [q.grad for g in opt.param_groups for q in g["params"]]
        self.at_step.append({"with_grad": sum(1 for g in seen if g is not None and bool((g != 0).any())),
                             "params": len(seen)})

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[StepGrads]:
        """Hook the optimizer's step for the block; the handle is removed on exit."""
        with self.attached():
            self.hook(self.optimizer.register_step_pre_hook(self._pre_step))
            yield self
