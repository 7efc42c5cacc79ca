"""`FirstStepGrads`: the gradients the optimizer holds when its first `step()` runs (float32
copies by parameter name), how many `step()` calls the block made, and whether the model's own
forward ran in training mode each time it was called."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .base import Probe

__all__ = ["FirstStepGrads"]


class FirstStepGrads(Probe):
    """`with FirstStepGrads(model, optimizer).attached_to() as probe:` around one update.

    grads: {parameter name: gradient at the first step()}; steps: step() calls seen;
    train_mode: `model.training` at each call of the model's own forward."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().__init__()
        self.model, self.optimizer = model, optimizer
        self._names = {id(q): n for n, q in model.named_parameters()}
        self.grads: dict[str, torch.Tensor] = {}
        self.steps = 0
        self.train_mode: list[bool] = []

    def _pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.steps == 0:
            self.grads = {self._names[id(q)]: q.grad.detach().float().clone() for g in opt.param_groups
                          for q in g["params"] if q.grad is not None and id(q) in self._names}
        self.steps += 1

    def _pre_forward(self, module: torch.nn.Module, args: Any) -> None:
        self.train_mode.append(bool(module.training))

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[FirstStepGrads]:
        """Hook the optimizer's step and the model's forward for the block; removed on exit."""
        with self.attached():
            self.hook(self.optimizer.register_step_pre_hook(self._pre_step))
            self.hook(self.model.register_forward_pre_hook(self._pre_forward))
            yield self
