"""`ForwardTap`: a training forward's batch and loss, read from hooks on the model.

HF `Trainer` callbacks never see the loss, and see no batch: both are taken here, the batch from a
forward pre-hook with kwargs (HF calls `model(**inputs)`, so the replay is `model(**batch).loss`),
the loss from the output (`output.loss` / `output["loss"]`). Only forwards in training mode with
gradients enabled count: evaluation and generation pass through untouched. The tensors are kept by
reference, never copied; nothing is read off the device here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from .base import Probe

__all__ = ["ForwardTap", "field", "loss_of", "call_with"]


def field(output: Any, name: str) -> Any:
    """`output.name` or `output["name"]` (ModelOutput, dict, dataclass), else None."""
    if isinstance(output, Mapping):
        return output.get(name)
    try:
        return getattr(output, name, None)
    except Exception:  # a property that raises: the value is simply not there
        return None


def loss_of(output: Any) -> Any:
    """The loss in a model's output: `output.loss`, `output["loss"]`, or a 0-d tensor itself."""
    if isinstance(output, torch.Tensor):
        return output if output.dim() == 0 else None
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0] if output[0].dim() == 0 else None
    return field(output, "loss")


def call_with(model: torch.nn.Module, batch: Any) -> Any:
    """Call `model` on a batch as the pre-hook saw it: kwargs as `**batch`, positional as `*batch`."""
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, tuple):
        return model(*batch)
    return model(batch)


class ForwardTap(Probe):
    """`on_forward(batch, output, loss)` after each training forward of `model`; `close()` removes it."""

    def __init__(self, model: torch.nn.Module, on_forward: Callable[[Any, Any, Any], None]) -> None:
        super().__init__()
        self.on_forward = on_forward
        self._batch: Any = None
        self.hook(model.register_forward_pre_hook(self._pre, with_kwargs=True))
        self.hook(model.register_forward_hook(self._post))

    def _pre(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if module.training and torch.is_grad_enabled():
            self._batch = dict(kwargs) if kwargs and not args else (args[0] if len(args) == 1 and not kwargs
                                                                       else tuple(args))
        return None

    def _post(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return None
        batch, self._batch = self._batch, None
        self.on_forward(batch, output, loss_of(output))
        return None

    def close(self) -> None:
        self.remove_handles()
