"""`FirstStepGrads`: the gradients the optimizer holds when its first `step()` runs (float32
copies by parameter name), how many `step()` calls the block made, how many times an LR scheduler
stepped, and whether the model's own forward ran in training mode each time it was called."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch

from .base import Probe

__all__ = ["FirstStepGrads"]


class FirstStepGrads(Probe):
    """`with FirstStepGrads(model, optimizer).attached_to() as probe:` around one update.

    grads: {parameter name: gradient at the first step()}; steps: step() calls seen;
    scheduler_steps: `LRScheduler.step()` calls seen (any scheduler, while the block runs);
    train_mode: `model.training` at each call of the model's own forward."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().__init__()
        self.model, self.optimizer = model, optimizer
        self._names = {id(q): n for n, q in model.named_parameters()}
        self.grads: dict[str, torch.Tensor] = {}
        self.steps = 0
        self.scheduler_steps = 0
        self.train_mode: list[bool] = []

    def _pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.steps == 0:
            self.grads = {self._names[id(q)]: q.grad.detach().float().clone() for g in opt.param_groups
                          for q in g["params"] if q.grad is not None and id(q) in self._names}
        self.steps += 1

    def _pre_forward(self, module: torch.nn.Module, args: Any) -> None:
        self.train_mode.append(bool(module.training))

    @contextlib.contextmanager
    def _counting_schedulers(self) -> Iterator[None]:
        """Count `LRScheduler.step` calls (the class attribute is put back on exit). Schedulers built
        during the block step once in their constructor: those calls are not counted."""
        cls = torch.optim.lr_scheduler.LRScheduler
        original = cls.__dict__["step"]

        @functools.wraps(original)
        def step(sched: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(sched, "last_epoch", -1) >= 0:  # not the constructor's own first step
                self.scheduler_steps += 1
            return original(sched, *args, **kwargs)

        cls.step = step  # type: ignore[method-assign]
        try:
            yield
        finally:
            cls.step = original  # type: ignore[method-assign]

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[FirstStepGrads]:
        """Hook the optimizer's step and the model's forward for the block; removed on exit."""
        with self.attached(), self._counting_schedulers():
            self.hook(self.optimizer.register_step_pre_hook(self._pre_step))
            self.hook(self.model.register_forward_pre_hook(self._pre_forward))
            yield self
