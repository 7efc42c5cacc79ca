"""Replaying a failed step under the locator, and putting the loop's state back whatever happens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..errors import SignalchainError
from ..experiments.numerics.locate import locate
from ..experiments.numerics.state import Snapshot
from ..records.numerics import LocateMeasurement
from ._reading import reduced

__all__ = ["replay_step", "stateful"]


def stateful(obj: Any) -> bool:
    """Can this optimizer (or scaler) be saved and put back? A duck-typed one often cannot."""
    return obj is not None and all(callable(getattr(obj, m, None)) for m in ("state_dict", "load_state_dict"))


def replay_step(model: torch.nn.Module, batch: Any, fn: Callable[[torch.nn.Module, Any], Any], start: Snapshot, *,
                optimizer: Any = None, scaler: Any = None, pipeline: Any = None, with_update: bool = False,
                state: Snapshot | None = None) -> LocateMeasurement:
    """Replay one step from `start` (its RNG; `state`: its weights too, for an update) and restore.

    Without `with_update` only the model is touched (forward and backward), so only the model, its
    gradients and the RNG are saved: an optimizer that cannot be saved does not stop the replay.
    An update is replayed only when the optimizer can be put back, else this raises (the Monitor
    turns that into the finding's text). The gradients the loop computed are put back in any case.
    """
    if with_update and not stateful(optimizer):
        raise SignalchainError(f"cannot replay the update: the optimizer ({type(optimizer).__name__}) has no "
                               "state_dict()/load_state_dict() to put its state back afterwards")
    opt = optimizer if with_update else None
    sc = scaler if (with_update and stateful(scaler)) else None
    grads = {n: q.grad.clone() for n, q in model.named_parameters() if q.grad is not None}
    now = Snapshot.take(model, opt, sc)  # the loop's state, restored after

    def restore() -> None:
        if state is not None:
            state.restore(model, opt)
        else:
            model.zero_grad(set_to_none=True)
            start.restore_rng()

    try:
        if pipeline is not None:
            return locate(pipeline, model, batch, opt, restore=restore)
        # an unreduced loss ([B] or [B, T]) is replayed as its mean, so that it can be backpropagated
        return locate(None, model, batch, opt, restore=restore, step=lambda m, b: reduced(fn(m, b)))
    finally:
        try:
            now.restore(model, opt, sc)
        finally:
            with torch.no_grad():
                for n, q in model.named_parameters():
                    q.grad = grads.get(n)
