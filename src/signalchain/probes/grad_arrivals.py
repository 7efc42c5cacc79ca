"""`GradArrivals`: the gradients arriving at one autograd node during backward (their largest finite
magnitude), which says whether the loss reaches that node at all."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .base import Probe

__all__ = ["GradArrivals"]


class GradArrivals(Probe):
    """`with GradArrivals(node).attached_to() as probe:` around a backward; `probe.reached` holds, per
    gradient arriving at the node, its largest finite magnitude (inf when none is finite). A `None`
    node watches nothing."""

    def __init__(self, node: Any) -> None:
        super().__init__()
        self.node = node
        self.reached: list[float] = []

    def _arrived(self, grad_outputs: tuple[Any, ...]) -> None:
        for g in grad_outputs:
            if isinstance(g, torch.Tensor):
                finite = g[torch.isfinite(g)]
                self.reached.append(float(finite.abs().max()) if finite.numel() else float("inf"))

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[GradArrivals]:
        """Hook the node (a pre hook) for the block; the handle is removed on exit."""
        with self.attached():
            if self.node is not None:
                self.hook(self.node.register_prehook(self._arrived))
            yield self
