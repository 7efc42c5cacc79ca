"""Gradient clipping applied to the GradScaler's scaled gradients, before `scaler.unscale_`.

pytorch/pytorch#40907: with `torch.cuda.amp`, adding `clip_grad_norm_(model.parameters(), max_norm)`
between `scaler.scale(loss).backward()` and `scaler.step(optimizer)` made the loss stop decreasing.
The gradients at that point are multiplied by the loss scale (65536 at the start), so the norm is
huge and the clip rescales them to `max_norm`; `scaler.step` then divides them by the scale again,
and the optimiser receives a gradient of norm `max_norm / scale` (about 1.5e-5) whatever the true
gradient was. The fix the thread got (the AMP docs' "working with unscaled gradients"): call
`scaler.unscale_(optimizer)` before clipping. Reproduced in a user's own AMP loop around the
reference model with `torch.amp.GradScaler("cpu")` at its default scale; the forward stays in
float32 because CPU float16 kernels are 10x slower (about 2 s a step here), and the scaler's
arithmetic (scale the loss, unscale in `step`) does not depend on the autocast dtype.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from signalchain import StepOutput
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig

BUG = RealBug(
    name="optim_amp_clip_before_unscale", thread="https://github.com/pytorch/pytorch/issues/40907",
    library="torch", idiom="own AMP loop (GradScaler), clip_grad_norm_ after backward", cls="optimiser-mechanics",
    cause="clip_grad_norm_ runs on the scaled gradients, so after scaler.step unscales them the update's "
          "gradient norm is max_norm / loss_scale (~1.5e-5) on every step",
    fix="scaler.unscale_(optimizer) before clip_grad_norm_",
    stages=("grad.norm", "optimizer"), cause_ids=("amp.clip_before_unscale", "optim.lr_too_small", "grad.zero"),
    symptom="flat-loss")

MAX_NORM = 1.0


class AmpLoop(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__(RefConfig(clip_grad=MAX_NORM))
        self.fixed = fixed

    def build_optimizer(self, model):
        opt = super().build_optimizer(model)
        self._scalers[opt] = self._last_scaler = torch.amp.GradScaler("cpu")  # init_scale 65536
        return opt

    def train_step(self, model, optimizer, batch, tap=lambda s, v, **m: v) -> StepOutput:
        model.train()
        out = self.step(model, batch, tap)
        scaler = self.scaler_for(optimizer)
        scaler.scale(out.loss).backward()
        if self.fixed:
            scaler.unscale_(optimizer)  # the fix: clip what the optimiser will really get
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)  # bug: scaled grads
        tap("grad.norm", grad_norm)
        scaler.step(optimizer)  # unscales now when unscale_ was not called: divides the clipped grads by the scale
        scaler.update()
        tap("amp.scale", scaler.get_scale())
        self.scheduler_for(optimizer).step()
        optimizer.zero_grad(set_to_none=True)
        out.extras["grad_norm"] = float(grad_norm)
        return out


def pipeline(fixed: bool) -> AmpLoop:
    return AmpLoop(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """The gradient norm the optimiser's step actually reads, against the true (unscaled) norm."""
    p = pipeline(fixed)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    seen: list[float] = []
    step = opt.step

    def recording_step(*a, **k):
        seen.append(float(torch.stack([q.grad.norm() for q in model.parameters() if q.grad is not None]).norm()))
        return step(*a, **k)

    opt.step = recording_step  # type: ignore[method-assign]
    batch = p.golden_batch(0)
    true = []
    for _ in range(3):
        out = p.step(model, batch)  # the true gradient norm at these weights, fp32 reference
        out.loss.backward()
        true.append(float(torch.stack([q.grad.norm() for q in model.parameters() if q.grad is not None]).norm()))
        model.zero_grad(set_to_none=True)
        p.train_step(model, opt, batch)
    applied = [s for s in seen if s == s]
    want = [min(t, MAX_NORM) for t in true]
    tiny = bool(applied) and max(applied) < 1e-3 * min(want)
    return tiny, (f"gradient norm at optimizer.step {[f'{a:.3g}' for a in applied]} against the clipped true "
                  f"norm {[f'{w:.3g}' for w in want]} (loss scale {p.scaler.get_scale():.0f})")
