"""`StepGuard`: skip one optimizer update on request, without the trainer's cooperation.

Neither HF's `Trainer` nor Lightning offers a hook that can veto `optimizer.step()`, so the guard
replaces `step` on the optimizer *instance* the trainer calls (HF: the `AcceleratedOptimizer`,
whose own `step` forwards to the torch optimizer; Lightning: the torch optimizer inside the
`LightningOptimizer`). While `skip_next` is set, the next call does not apply the update, and the
flag clears itself (one-shot). A closure is always run: in Lightning's automatic optimisation the
forward and backward happen inside it, and the judgement that may set the flag runs at its end
(`on_before_optimizer_step`), so the guard runs the closure first and decides afterwards.
`close()` puts back whatever `step` the instance had before (a scheduler's counting wrapper too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["StepGuard"]

_UNSET = object()


class StepGuard:
    """Wrap `optimizer.step` on the instance; `skip_next = True` makes the next call a no-op update."""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer
        self.skip_next = False
        self.skipped: list[int] = []  # calls (0-based) whose update was withheld
        self.calls = 0
        # an attribute set on the instance (a scheduler's wrapper) is restored as such; otherwise
        # the instance attribute is deleted so that the class's `step` shows through again
        self._own = optimizer.__dict__.get("step", _UNSET) if hasattr(optimizer, "__dict__") else _UNSET
        self._inner: Callable[..., Any] = optimizer.step

        def step(closure: Callable[[], Any] | None = None, *args: Any, **kwargs: Any) -> Any:
            return self._step(closure, *args, **kwargs)

        if hasattr(self._inner, "_wrapped_by_lr_sched"):  # torch's LR scheduler checks its wrapper is still there
            step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
        optimizer.step = step

    def _step(self, closure: Callable[[], Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        result: Any = None
        ran = False
        if closure is not None:
            with torch.enable_grad():  # as torch's optimizers call it
                result, ran = closure(), True
        index, self.calls = self.calls, self.calls + 1
        if self.skip_next:
            self.skip_next = False
            self.skipped.append(index)
            return result
        if closure is None:
            return self._inner(*args, **kwargs)
        return self._inner(_Once(closure, result) if ran else closure, *args, **kwargs)

    def close(self) -> None:
        """Restore the optimizer's own `step`; idempotent."""
        if self.optimizer is None:
            return
        try:
            if self._own is _UNSET:
                self.optimizer.__dict__.pop("step", None)
            else:
                self.optimizer.step = self._own
        finally:
            self.optimizer = None


class _Once:
    """A closure already evaluated once: the first call returns that result (the optimizer's own
    call), later ones (LBFGS re-evaluates) run the real closure again."""

    def __init__(self, closure: Callable[[], Any], result: Any) -> None:
        self.closure, self.result, self.used = closure, result, False

    def __call__(self) -> Any:
        if not self.used:
            self.used = True
            return self.result
        return self.closure()
