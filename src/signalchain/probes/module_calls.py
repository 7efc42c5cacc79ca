"""`ModuleCalls`: forward hooks on every module of a model: how many module calls completed, and an
optional callback per call (the module's dotted name, the module and its output)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .base import Probe

__all__ = ["ModuleCalls"]

OnCall = Callable[[str, torch.nn.Module, Any], None]


class ModuleCalls(Probe):
    """`with ModuleCalls(model).attached_to() as calls:` around a step; read `calls.count` (reset it
    between steps). `on_call(name, module, output)` runs after every module's forward."""

    def __init__(self, model: torch.nn.Module, on_call: OnCall | None = None) -> None:
        super().__init__()
        self.model = model
        self.on_call = on_call
        self.count = 0
        self._names = {m: n for n, m in model.named_modules()}

    def _post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self.count += 1
        if self.on_call is not None:
            self.on_call(self._names.get(module, "?"), module, output)

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[ModuleCalls]:
        """Hook every module of the model for the block; every handle is removed on exit."""
        with self.attached():
            for m in self.model.modules():
                self.hook(m.register_forward_hook(self._post))
            yield self
