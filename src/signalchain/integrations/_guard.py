"""`StepGuard`: skip one optimizer update on request, without the trainer's cooperation.

Neither HF's `Trainer` nor Lightning offers a hook that can veto `optimizer.step()`, so the guard
replaces `step` on the optimizer *instance* the trainer calls (HF: the `AcceleratedOptimizer`,
whose own `step` forwards to the torch optimizer; Lightning: the torch optimizer inside the
`LightningOptimizer`). While `skip_next` is set, the next call does not apply the update, and the
flag clears itself (one-shot). The update is withheld by dropping the gradients, not the call: the
optimizer still runs, so that a GradScaler's per-step bookkeeping (HF's `unscale_` before clipping
needs its `update()`) and a scheduler's count go on, and torch's optimizers skip a parameter without
a gradient (no step, no weight decay, no state change). A closure always runs: in Lightning's
automatic optimisation forward and backward happen inside it and the judgement that sets the flag
runs at its end (`on_before_optimizer_step`), so the gradients are dropped after it.
`close()` puts back whatever `step` the instance had before (a scheduler's counting wrapper too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
        index, self.calls = self.calls, self.calls + 1
        if closure is None:
            if self.skip_next:
                self._withhold(index)
            return self._inner(*args, **kwargs)

        def judged() -> Any:  # the verdict is made inside the closure (Lightning): withhold after it
            result = closure()
            if self.skip_next:
                self._withhold(index)
            return result

        return self._inner(judged, *args, **kwargs)

    def _withhold(self, index: int) -> None:
        """No update from this step: the optimizer still runs (a GradScaler's bookkeeping, a scheduler's
        count), but with no gradients, which torch's optimizers skip: weights and their state stay."""
        self.skip_next = False
        self.skipped.append(index)
        for group in getattr(self.optimizer, "param_groups", None) or []:
            for q in group["params"]:
                q.grad = None

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
