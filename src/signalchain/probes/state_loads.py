"""`StateLoads`: every `Module.load_state_dict` call made while the block runs (building a model):
the module's own keys, the checkpoint's keys, what matched, and `strict`."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch

from .base import Probe

__all__ = ["StateLoads"]


class StateLoads(Probe):
    """`with StateLoads().attached_to() as probe: pipeline.build_model(seed)`; `probe.calls` holds one
    dict per call: module, strict, own (its state keys), given (the checkpoint's), missing, unexpected."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def attached_to(self) -> Iterator[StateLoads]:
        """Wrap `torch.nn.Module.load_state_dict` for the block (the class attribute is put back on exit);
        a nested call (a module loading its children) is recorded once, at the outermost call."""
        cls = torch.nn.Module
        original = cls.__dict__["load_state_dict"]
        depth = [0]

        @functools.wraps(original)
        def load_state_dict(module: torch.nn.Module, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            try:
                result = original(module, state_dict, *args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                with self.ours():
                    strict = kwargs.get("strict", args[0] if args else True)
                    try:
                        given = [str(k) for k in state_dict.keys()]
                    except AttributeError:
                        given = []
                    self.calls.append({"module": type(module).__name__, "strict": bool(strict),
                                       "own": list(module.state_dict().keys()), "given": given,
                                       "missing": list(getattr(result, "missing_keys", []) or []),
                                       "unexpected": list(getattr(result, "unexpected_keys", []) or [])})
            return result

        cls.load_state_dict = load_state_dict  # type: ignore[method-assign]
        try:
            with self.attached():
                yield self
        finally:
            cls.load_state_dict = original  # type: ignore[method-assign]
