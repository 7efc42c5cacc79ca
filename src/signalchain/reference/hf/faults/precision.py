"""Mixed-precision failures in a hand-written fp16 loop around HF MusicGen: a scaler rebuilt (at
an overflowing scale) every step, and a loss scaled twice. The bed's `amp="fp16"` runs CPU autocast in float16
with a `torch.amp.GradScaler("cpu")`; each fault switches it on, as the run's config does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ._registry import fault
from ._util import no_tap, trainable

if TYPE_CHECKING:
    from signalchain import StepOutput

    from ..pipeline import HFBedPipeline

SECTION = "Mixed-precision failures"


def _scaled_step(p: HFBedPipeline, model: Any, optimizer: Any, batch: Any, tap: Any, scale_loss: Any) -> StepOutput:
    """The integration's fp16 train step with the loss scaling replaceable."""
    model.train()
    out = p.step(model, batch, tap)
    scaler = p.scaler_for(optimizer)
    scale_loss(scaler, out.loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(trainable(model), p.clip_grad)
    tap("grad.norm", norm)
    scaler.step(optimizer)
    scaler.update()
    tap("amp.scale", scaler.get_scale())
    optimizer.zero_grad(set_to_none=True)
    out.extras["grad_norm"] = float(norm)
    return out


@fault("scaler_built_every_step", "precision", "the gradient scaler skips every step", SECTION,
       ["amp.steps_skipped", "optim.step_skipped"], "optimizer", symptom="flat-loss")
def _scaler_built_every_step(p: HFBedPipeline) -> None:
    p.amp = "fp16"

    def train_step(model: Any, optimizer: Any, batch: Any, tap: Any = no_tap) -> StepOutput:
        # Bug: the GradScaler is constructed inside the training step (the snippet it came from showed
        # one step), with `init_scale=2**32` from a DeepSpeed config (`"initial_scale_power": 32`). Each
        # step a fresh scaler starts at 2**32: the scaled float16 gradients overflow, the step is
        # skipped and the scale halved once — and that scaler is thrown away. No step ever applies.
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**32)
        p._scalers[optimizer] = p._last_scaler = scaler
        return _scaled_step(p, model, optimizer, batch, tap, lambda s, loss: s.scale(loss))

    p.train_step = train_step  # type: ignore[method-assign]


@fault("loss_scaled_twice", "precision", "the loss scale collapses", SECTION,
       ["amp.scale_collapse", "amp.steps_skipped"], "optimizer", symptom="flat-loss")
def _loss_scaled_twice(p: HFBedPipeline) -> None:
    p.amp = "fp16"

    def train_step(model: Any, optimizer: Any, batch: Any, tap: Any = no_tap) -> StepOutput:
        # Bug: the loss is multiplied by `scaler.get_scale()` (manual loss scaling left from an apex
        # recipe) and then passed through `scaler.scale()` as well: the gradients carry the scale
        # squared (2**32), overflow float16, and the scaler halves its scale at every skipped step
        # until scale**2 fits — a scale collapsed to a few hundred, and every step before it lost.
        return _scaled_step(p, model, optimizer, batch, tap, lambda s, loss: s.scale(loss * s.get_scale()))

    p.train_step = train_step  # type: ignore[method-assign]
