"""`NonFiniteGrads`: the parameters whose gradient is not finite once backward has accumulated it
(a post-accumulate-grad hook on every parameter that requires grad)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch

from .base import Probe

__all__ = ["NonFiniteGrads"]


class NonFiniteGrads(Probe):
    """`with NonFiniteGrads(model, pause=watch.ours).attached_to() as grads:` around a step; `grads.bad`
    lists, in the order they were seen, the parameters whose accumulated gradient is not finite.

    pause: the pause of the probe watching the same step (our check is not one of the step's ops);
    this probe's own `ours` without it.
    """

    def __init__(self, model: torch.nn.Module, pause: Callable[[], AbstractContextManager[Any]] | None = None) -> None:
        super().__init__()
        self.model = model
        self.pause = pause or self.ours
        self.bad: list[str] = []

    def _check(self, q: torch.Tensor, name: str) -> None:
        with self.pause():
            if q.grad is not None and not bool(torch.isfinite(q.grad.sum(dtype=torch.float32))):
                self.bad.append(name)

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[NonFiniteGrads]:
        """Hook every parameter that requires grad for the block; every handle is removed on exit."""
        with self.attached():
            for name, q in self.model.named_parameters():
                if q.requires_grad:
                    self.hook(q.register_post_accumulate_grad_hook(lambda q, name=name: self._check(q, name)))
            yield self
