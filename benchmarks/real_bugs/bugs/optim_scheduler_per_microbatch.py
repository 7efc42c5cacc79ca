"""The LR scheduler stepped on every micro-batch while the optimiser steps once per accumulation.

starVLA/starVLA#210: with `gradient_accumulation_steps > 1`, `lr_scheduler.step()` ran on every
micro-batch while the optimiser only updated on the last one of each accumulation, so the schedule
advanced `accumulation` times faster than configured: the warmup ended early and the decay reached
its floor halfway through the run (and a resumed run, replaying optimizer steps, jumped in LR). The
fix: step the scheduler only when the optimiser really stepped (`if accelerator.sync_gradients`).
Reproduced in a user's own loop around the reference model: 2 micro-batches of 4 per update,
linear warmup over 10 updates then linear decay to 0 at the 100 updates the user planned.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from real_bugs.bugs.optim_ga_token_mean import micro_batches, no_tap, tap_combined
from signalchain import StepOutput
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="optim_scheduler_per_microbatch", thread="https://github.com/starVLA/starVLA/pull/210",
    library="accelerate", idiom="own loop, 2 accumulation steps, warmup + linear decay scheduler",
    cls="optimiser-mechanics",
    cause="scheduler.step() runs once per micro-batch, so the LR schedule advances 2 steps per optimizer "
          "update: warmup ends at update 5 instead of 10 and the LR reaches 0 at update 50 of 100",
    fix="step the scheduler only after an optimizer update (once per accumulation)",
    stages=("optimizer",), cause_ids=("optim.schedule_too_fast", "optim.lr", "history.lr_schedule"),
    symptom="flat-loss")

ACCUM = 2
WARMUP, TOTAL = 10, 100  # in optimizer updates, as the user planned the run


def schedule(step: int) -> float:
    if step < WARMUP:
        return (step + 1) / WARMUP
    return max(0.0, (TOTAL - step) / (TOTAL - WARMUP))


class ScheduledLoop(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def build_optimizer(self, model):
        opt = torch.optim.AdamW(self.param_groups(model), lr=self.cfg.lr, betas=self.cfg.betas)
        self._schedulers[opt] = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        return opt

    def train_step(self, model, optimizer, batch, tap=no_tap) -> StepOutput:
        model.train()
        scheduler = self.scheduler_for(optimizer)
        outs, logged = [], torch.zeros(())
        for micro in micro_batches(batch, ACCUM):
            out = self.step(model, micro, no_tap)
            (out.loss / ACCUM).backward()
            logged = logged + out.loss.detach() / ACCUM
            outs.append(out)
            if not self.fixed:
                scheduler.step()  # bug: once per micro-batch
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.clip_grad)
        tap("grad.norm", grad_norm)
        optimizer.step()
        if self.fixed:
            scheduler.step()  # the fix: once per optimizer update
        optimizer.zero_grad(set_to_none=True)
        out = tap_combined(tap, outs, logged)
        out.extras["grad_norm"] = float(grad_norm)
        return out


def pipeline(fixed: bool) -> ScheduledLoop:
    return ScheduledLoop(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """The LR each optimizer update used, against the schedule the user configured (in updates)."""
    p = pipeline(fixed)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    used: list[float] = []
    step = opt.step

    def recording_step(*a, **k):
        used.append(opt.param_groups[0]["lr"] / p.cfg.lr)
        return step(*a, **k)

    opt.step = recording_step  # type: ignore[method-assign]
    batch = p.golden_batch(0)
    for _ in range(8):
        p.train_step(model, opt, batch)
    want = [schedule(k) for k in range(len(used))]
    ahead = max(u - w for u, w in zip(used, want))
    sched = p.scheduler_for(opt)
    return ahead > 0.05, (f"LR factor at updates 0-7 {[round(u, 2) for u in used]} against the schedule "
                          f"{[round(w, 2) for w in want]}; scheduler steps {sched.last_epoch} for {len(used)} updates")
