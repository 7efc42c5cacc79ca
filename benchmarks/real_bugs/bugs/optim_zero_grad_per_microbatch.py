"""`optimizer.zero_grad()` before every micro-batch's backward: accumulation keeps only the last one.

ZiqiaoPeng/DualTalk#9: the training loop called `optimizer.zero_grad()` right before each
`loss.backward()` and `optimizer.step()` every `gradient_accumulation_steps` iterations, so each
update used the gradient of the last micro-batch only (the others were wiped), divided by nothing
and never averaged: the configured effective batch was never trained. The fix given in the thread:
zero the gradients only after (or before) a whole accumulation, divide the loss by the
accumulation steps, and step on the last micro-batch. Reproduced in a user's own loop around the
reference model: 4 micro-batches of 2 clips per update.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from real_bugs.bugs.optim_ga_token_mean import flat_grad, micro_batches, no_tap, tap_combined
from signalchain import StepOutput
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="optim_zero_grad_per_microbatch", thread="https://github.com/ZiqiaoPeng/DualTalk/issues/9",
    library="torch", idiom="own loop, 4 accumulation steps", cls="optimiser-mechanics",
    cause="zero_grad() before each micro-batch's backward discards the gradients of the first 3 of 4 "
          "micro-batches: every update sees one quarter of the batch",
    fix="zero the gradients once per accumulation (after optimizer.step), divide the loss by the steps",
    stages=("optimizer", "grad.norm"), cause_ids=("optim.accumulation_discarded", "optim.grad_not_loss_grad"), symptom="flat-loss")

ACCUM = 4


class AccumLoop(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def accumulate(self, model, optimizer, batch) -> tuple[list[StepOutput], torch.Tensor]:
        outs, logged = [], torch.zeros(())
        for micro in micro_batches(batch, ACCUM):
            if not self.fixed:
                optimizer.zero_grad()  # bug: wipes what the earlier micro-batches accumulated
            out = self.step(model, micro, no_tap)
            (out.loss / ACCUM).backward()
            logged = logged + out.loss.detach() / ACCUM
            outs.append(out)
        return outs, logged

    def train_step(self, model, optimizer, batch, tap=no_tap) -> StepOutput:
        model.train()
        outs, logged = self.accumulate(model, optimizer, batch)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.clip_grad)
        tap("grad.norm", grad_norm)
        optimizer.step()
        self.scheduler_for(optimizer).step()
        optimizer.zero_grad(set_to_none=True)  # the fix's place: once per update
        out = tap_combined(tap, outs, logged)
        out.extras["grad_norm"] = float(grad_norm)
        return out


def pipeline(fixed: bool) -> AccumLoop:
    return AccumLoop(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """The gradient the update applies against the mean gradient of the whole batch (cosine, norm)."""
    p = pipeline(fixed)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    batch = p.golden_batch(0)
    for micro in micro_batches(batch, ACCUM):
        (p.step(model, micro).loss / ACCUM).backward()
    want = flat_grad(model).clone()
    opt.zero_grad(set_to_none=True)
    p.accumulate(model, opt, batch)
    got = flat_grad(model)
    cos = float(torch.nn.functional.cosine_similarity(got, want, dim=0))
    ratio = float(got.norm() / want.norm())
    return cos < 0.95, f"applied gradient vs the batch's mean gradient: cosine {cos:.3f}, norm ratio {ratio:.2f}"
