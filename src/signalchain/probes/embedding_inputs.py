"""`EmbeddingInputs`: the integer ids entering every `nn.Embedding` of a model during a step (and,
when asked, what each lookup returned)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .base import Probe

__all__ = ["EmbeddingCall", "EmbeddingInputs"]


@dataclass
class EmbeddingCall:
    """One embedding lookup: the module's dotted name, the module, the ids it was given (a detached
    copy) and, with `outputs=True`, the vectors it returned (detached, None until it returned)."""

    name: str
    module: torch.nn.Embedding
    ids: torch.Tensor
    output: torch.Tensor | None = None


class EmbeddingInputs(Probe):
    """`with EmbeddingInputs(model).attached_to() as probe:` around a step; read `probe.calls`.

    Only calls whose first argument is a tensor are kept. The hooks are removed when the block ends,
    whatever the step raised; a probe never breaks the step it watches.
    """

    def __init__(self, model: torch.nn.Module, outputs: bool = False) -> None:
        super().__init__()
        self.model = model
        self.outputs = outputs
        self.calls: list[EmbeddingCall] = []
        self._names = {m: n for n, m in model.named_modules()}
        self._open: dict[int, EmbeddingCall] = {}  # id(module) -> its call still running

    def _pre(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self.paused or not args or not isinstance(args[0], torch.Tensor):
            return
        with self.ours():
            call = EmbeddingCall(self._names.get(module, type(module).__name__), module, args[0].detach().clone())
            self.calls.append(call)
            self._open[id(module)] = call

    def _post(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        call = self._open.pop(id(module), None)
        if call is not None and isinstance(output, torch.Tensor):
            with self.ours():
                call.output = output.detach().clone()

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[EmbeddingInputs]:
        """Hook every embedding of the model for the block; every handle is removed on exit."""
        with self.attached():
            for m in self.model.modules():
                if isinstance(m, torch.nn.Embedding):
                    self.hook(m.register_forward_pre_hook(self._pre))
                    if self.outputs:
                        self.hook(m.register_forward_hook(self._post))
            yield self
