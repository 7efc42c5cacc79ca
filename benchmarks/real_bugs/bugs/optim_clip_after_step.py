"""Gradient clipping called after `optimizer.step()`: every update applies the unclipped gradient.

jongwook/onsets-and-frames#24: the piano-transcription trainer ran `loss.backward()`,
`optimizer.step()`, `scheduler.step()` and only then `clip_grad_norm_(model.parameters(),
clip_gradient_norm)`, so the clipping rescaled gradients that had already been applied and that the
next iteration zeroes: `clip_gradient_norm` did nothing. The maintainer: "Yeah it definitely should"
go between `.backward()` and `.step()`. Reproduced in a user's own loop around the reference model in
the thread's order (zero_grad, backward, step, schedule, clip); the reference clips at 1.0 and its
early gradients have norms of 1-2, so most updates are larger than the user configured.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from real_bugs.bugs.optim_ga_token_mean import no_tap
from signalchain import StepOutput
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="optim_clip_after_step", thread="https://github.com/jongwook/onsets-and-frames/issues/24",
    library="torch", idiom="own loop (zero_grad, backward, step, scheduler.step, clip_grad_norm_)",
    cls="optimiser-mechanics",
    cause="clip_grad_norm_ runs after optimizer.step(): the step already used the unclipped gradient, so the "
          "configured max norm never limits an update",
    fix="call clip_grad_norm_ between loss.backward() and optimizer.step()",
    stages=("optimizer", "grad.norm"), cause_ids=("optim.clip_after_step", "optim.clip_ineffective"),
    symptom="unstable")


class TranscriberLoop(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def train_step(self, model, optimizer, batch, tap=no_tap) -> StepOutput:
        model.train()
        out = self.step(model, batch, tap)
        optimizer.zero_grad()
        out.loss.backward()
        if self.fixed:
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.clip_grad)
            tap("grad.norm", grad_norm)
        optimizer.step()
        self.scheduler_for(optimizer).step()
        if not self.fixed:  # the thread's order: clipping what the step has already applied
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.clip_grad)
            tap("grad.norm", grad_norm)
        out.extras["grad_norm"] = float(grad_norm)
        return out


def pipeline(fixed: bool) -> TranscriberLoop:
    return TranscriberLoop(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """The norm of the gradient each optimizer.step() actually applied, against the configured max norm."""
    p = pipeline(fixed)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    applied: list[float] = []
    step = opt.step

    def recording_step(*a, **k):
        grads = [q.grad.flatten() for q in model.parameters() if q.grad is not None]
        applied.append(float(torch.cat(grads).norm()))
        return step(*a, **k)

    opt.step = recording_step  # type: ignore[method-assign]
    it = p.loader("train", 0)
    for _ in range(8):
        p.train_step(model, opt, next(it))
    over = [n for n in applied if n > 1.01 * p.cfg.clip_grad]
    return bool(over), (f"{len(over)} of {len(applied)} updates applied a gradient above the max norm "
                        f"{p.cfg.clip_grad}: norms {[round(n, 2) for n in applied]}")
