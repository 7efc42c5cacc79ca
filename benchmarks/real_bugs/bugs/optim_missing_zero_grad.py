"""The training step never calls `optimizer.zero_grad()`: every update adds all previous gradients.

wenet-e2e/wekws#73 (fixing #72): the keyword-spotting executor called `loss.backward()` and
`optimizer.step()` on every batch but never zeroed the gradients, so `.grad` kept the running sum
of every batch since the start and each update followed that stale sum instead of the current
batch's gradient (clipping then hides its growing norm). The fix: `optimizer.zero_grad()` before
`loss.backward()`. Reproduced in a user's own training step around the reference model (AdamW,
clip at 1.0, warmup schedule), the same step the reference has minus the zero_grad.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from real_bugs.bugs.optim_ga_token_mean import flat_grad, no_tap
from signalchain import StepOutput
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="optim_missing_zero_grad", thread="https://github.com/wenet-e2e/wekws/pull/73",
    library="torch", idiom="own loop (executor: backward, clip, step)", cls="optimiser-mechanics",
    cause="optimizer.zero_grad() is never called: .grad holds the sum of every gradient since step 0 and "
          "each update follows that sum",
    fix="optimizer.zero_grad() before loss.backward() (or after optimizer.step())",
    stages=("optimizer", "grad.norm"), cause_ids=("optim.grad_not_zeroed", "grad.exploding"), symptom="unstable")


class Executor(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def backward(self, model, optimizer, batch, tap=no_tap) -> StepOutput:
        model.train()
        if self.fixed:
            optimizer.zero_grad()  # the fix
        out = self.step(model, batch, tap)
        out.loss.backward()
        return out

    def train_step(self, model, optimizer, batch, tap=no_tap) -> StepOutput:
        out = self.backward(model, optimizer, batch, tap)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.clip_grad)
        tap("grad.norm", grad_norm)
        optimizer.step()
        self.scheduler_for(optimizer).step()
        out.extras["grad_norm"] = float(grad_norm)
        return out


def pipeline(fixed: bool) -> Executor:
    return Executor(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """At the 6th update: the gradient the step applies against this batch's own gradient."""
    p = pipeline(fixed)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    it = p.loader("train", 0)
    for _ in range(5):
        p.train_step(model, opt, next(it))
    batch = next(it)
    p.backward(model, opt, batch)  # what the 6th update's step reads (before clipping)
    applied = flat_grad(model).clone()
    model.zero_grad(set_to_none=True)
    p.step(model, batch).loss.backward()
    own = flat_grad(model)
    cos = float(torch.nn.functional.cosine_similarity(applied, own, dim=0))
    ratio = float(applied.norm() / own.norm())
    return cos < 0.95 or ratio > 1.5, f"applied vs the batch's own gradient: cosine {cos:.3f}, norm ratio {ratio:.2f}"
