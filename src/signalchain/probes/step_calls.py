"""`StepCalls`: the `optimizer.step()` calls that completed, counted by a step post hook that stays
until `close()` (the Monitor counts a user's steps this way, for as long as the user keeps it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .base import Probe

__all__ = ["StepCalls"]


class StepCalls(Probe):
    """Registers on construction; `count` is the steps seen, `on_step()` (if given) runs after each;
    `close()` removes the hook."""

    def __init__(self, optimizer: torch.optim.Optimizer, on_step: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.count = 0
        self.on_step = on_step
        self.hook(optimizer.register_step_post_hook(self._post_step))

    def _post_step(self, *_: Any) -> None:
        self.count += 1
        if self.on_step is not None:
            self.on_step()

    def close(self) -> None:
        self.remove_handles()
