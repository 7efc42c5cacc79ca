"""`FirstForward`: the first training forward of a model and of one of its submodules, kept once.

The live session's first-step judges read what a model was called with (its kwargs: HF's
`input_ids`, `attention_mask`, `labels`), what it returned (logits, loss) and what an inner module
really read (an HF MusicGen decoder's `input_ids`: the user's decoder inputs, or those the model
shifted from the labels). Only a forward in training mode with gradients enabled counts; after the
first, nothing is kept, and `close()` removes the hooks. Inputs are kept by reference, never copied;
of the output only the logits' shape and the (detached) loss: holding the logits through backward
would raise the first step's peak memory by their size.
"""

from __future__ import annotations

from typing import Any

import torch

from .base import Probe
from .forward_tap import field

__all__ = ["FirstForward"]


class FirstForward(Probe):
    """`kwargs`, `logits_shape`, `loss` of `model`'s first training forward; `inner_ids`: the
    `input_ids` (or first positional argument) of `inner`'s first training forward."""

    def __init__(self, model: torch.nn.Module, inner: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.kwargs: dict[str, Any] | None = None
        self.seen_output = False
        self.logits_shape: tuple[int, ...] | None = None
        self.logits_dtype: str | None = None
        self.loss: torch.Tensor | None = None
        self.inner_ids: torch.Tensor | None = None
        self.hook(model.register_forward_pre_hook(self._pre, with_kwargs=True))
        self.hook(model.register_forward_hook(self._post))
        if inner is not None:
            self.hook(inner.register_forward_pre_hook(self._inner_pre, with_kwargs=True))

    @staticmethod
    def _training(module: torch.nn.Module) -> bool:
        return module.training and torch.is_grad_enabled()

    def _pre(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.kwargs is None and self._training(module):
            self.kwargs = dict(kwargs)

    def _post(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if not self.seen_output and self.kwargs is not None and self._training(module):
            self.seen_output = True
            logits, loss = field(output, "logits"), field(output, "loss")
            if isinstance(logits, torch.Tensor):
                self.logits_shape = tuple(logits.shape)
                self.logits_dtype = str(logits.dtype).replace("torch.", "")
            if isinstance(loss, torch.Tensor) and loss.dim() == 0:
                self.loss = loss.detach()

    def _inner_pre(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.inner_ids is None and self._training(module):
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.inner_ids = ids if isinstance(ids, torch.Tensor) else None

    def release(self) -> None:
        """Let go of the kept values (the batch, the logits)."""
        self.kwargs = self.loss = self.inner_ids = None

    def close(self) -> None:
        self.remove_handles()
