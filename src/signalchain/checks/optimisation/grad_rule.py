"""The gradient the optimizer stepped with against the loss's own gradient (`GradRuleMeasurement`).

Only what the two gradients show together is judged, against this pipeline's own numbers:
- with a loss scale S, |g| · S at |∇loss| while |g| is S times too small: unscaled twice;
- with a loss scale S, |g| S times too small and |g| · S at some other norm (the max_norm a user
  writes, whatever |∇loss| is): clipped while still scaled, `clip_grad_norm_` before `scaler.unscale_`;
- g turned away from ∇loss by more than two backward passes of the same batch differ: the update
  is not the loss's gradient (an accumulation that averages micro-batch means of unequal token
  counts, gradients of another batch, a partial backward): a warning, since a pipeline may mean it.
"""

from __future__ import annotations

import math

from ...findings import Finding
from ...records.optimisation import GradRuleMeasurement
from ..base import make

__all__ = ["judge_grad_rule", "judge_train_mode", "judge_zeroing", "judge_schedule_steps", "judge_clip_order"]

CHECK = "checks.grad_rule"
TINY = 0.05  # |g| / |∇loss| below this is not clipping a user chose (that scales by max_norm / |∇loss|)
TURNED = 0.15  # cosine the AMP rules allow to be lost beyond two plain backward passes' disagreement
AWAY = 0.3  # cosine lost beyond that disagreement before the direction itself is a finding: a clean
# update made of micro-batches that a pipeline processes apart (their own crops, caption dropout)
# turns by up to ~0.1 (real-bug bed twins: 0.88-0.92 against 1.00)
STEADY = 0.95  # the two plain backward passes agree at least this well: a cosine can be read
#: Share of the second step's gradient norm along the marker that replaced the first update's leftover
#: .grad (a marker at least as long as the loss's gradient). Random noise is orthogonal to any batch's
#: gradient: a step that zeroed holds ~1/√(values) of it (0.00-0.01 at this project's smallest models);
#: one that did not holds |marker| / |marker + ∇loss| ≥ ~0.7, whatever the clipping does to the sum.
CARRIED = 0.2


def judge_grad_rule(m: GradRuleMeasurement | None) -> list[Finding]:
    if m is None or m.error or not m.params:
        return []
    nums = (m.loss_norm, m.step_norm, m.cosine, m.floor)
    if not all(math.isfinite(x) for x in nums) or m.loss_norm <= 0:
        return []  # non-finite gradients are the numerics family's finding
    ratio = m.step_norm / m.loss_norm
    ev = dict(loss_grad_norm=m.loss_norm, step_grad_norm=m.step_norm, ratio=ratio, cosine=m.cosine,
              two_backward_cosine=m.floor, scale=m.scale, tensors=m.params)
    s = m.scale
    if s and 0 < ratio < TINY and m.loss_norm < s and m.cosine >= m.floor - TURNED:
        scaled = m.step_norm * s
        # Unscaled twice gives back |∇loss| exactly (to within what two backward passes differ by);
        # clipping while scaled gives the clipping norm, whatever |∇loss| is.
        if abs(scaled / m.loss_norm - 1) <= 0.03 + (1 - m.floor):
            return [make("amp.unscaled_twice", "error", "optimizer",
                         f"the optimizer stepped with gradients of norm {m.step_norm:.3g}, {1 / ratio:.0f}× smaller "
                         f"than the loss's gradient ({m.loss_norm:.3g}); times the loss scale ({s:.0f}) they are "
                         f"{scaled:.3g}: divided by the scale twice", CHECK,
                         hint="unscale once: `scaler.unscale_(optimizer)` before clipping, then `scaler.step` (which "
                              "does not unscale again); a wrapper or a manual `/ scale` on top of it divides twice",
                         **ev)]
        if scaled > m.loss_norm / TINY:
            return []  # |g| · scale is no clipping norm: a large gradient clipped after unscale_, as meant
        return [make("amp.clip_before_unscale", "error", "optimizer",  # |g| · scale: the clipping norm
                     f"the optimizer stepped with gradients of norm {m.step_norm:.3g} against the loss's gradient "
                     f"of {m.loss_norm:.3g} ({1 / ratio:.0f}× smaller); times the loss scale ({s:.0f}) their "
                     f"norm is {scaled:.3g}: they were clipped to {scaled:.3g} while still scaled, then unscaled",
                     CHECK,
                     hint="call `scaler.unscale_(optimizer)` before `clip_grad_norm_`: clipping scaled "
                          "gradients clips at max_norm × scale and leaves every update 1/scale of what was meant",
                     clip_norm=scaled, **ev)]
    if m.floor >= STEADY and m.cosine < m.floor - AWAY and 0.2 <= ratio <= 5:
        forwards = len(m.train_mode)
        micro = (f"; the update ran {forwards} forward passes for {m.steps} optimizer step(s): a `zero_grad()` "
                 "inside the accumulation loop (only the last micro-batch's gradient reaching the step) turns it "
                 "this way" if forwards > m.steps else "")
        return [make("optim.grad_not_loss_grad", "warning", "optimizer",
                     f"the gradient the optimizer stepped with points away from the loss's gradient of the same "
                     f"batch: cosine {m.cosine:.2f}, where two plain backward passes agree at {m.floor:.2f}{micro}",
                     CHECK,
                     hint=("zero the gradients once per optimizer step (before the first micro-batch's backward or "
                           "after `optimizer.step()`), never per micro-batch; " if micro else "")
                     + "the update is not d(loss)/d(weights): with gradient accumulation, weight each micro-batch "
                       "by its share of the batch's tokens (sum the token losses, divide by the batch's token "
                       "count once) rather than averaging per-micro-batch means; check that no backward of "
                       "another batch or a stale .grad is added", forwards=forwards, **ev)]
    return []


def judge_train_mode(m: GradRuleMeasurement | None) -> list[Finding]:
    """The pipeline's own update ran every forward with the model in eval mode while the model is
    configured to drop out: dropout (and any train-only behaviour) is off in training. The classic
    way: an evaluation or a checkpoint check calls `model.eval()` and nothing calls `model.train()`."""
    if m is None or not m.train_mode or any(m.train_mode) or not m.dropout:
        return []
    where = sorted(m.dropout.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{k} p={v:g}" for k, v in where[:3]) + (f" (+{len(where) - 3} more)" if len(where) > 3 else "")
    return [make("model.eval_mode_training", "warning", "logits",
                 f"the model ran in eval mode in all {len(m.train_mode)} forward passes of a training update, while "
                 f"it is configured to drop out ({shown}): dropout is off in every update", CHECK,
                 hint="call `model.train()` at the start of each training step (an evaluation or checkpoint check "
                      "called `model.eval()` and nothing switched back); set the dropout to 0 instead if no dropout "
                      "is meant", forwards=len(m.train_mode), dropout=dict(where[:20]))]


def judge_zeroing(m: GradRuleMeasurement | None) -> list[Finding]:
    """The second update's step still held the previous update's gradient: `.grad` is never zeroed
    between updates, so every update follows the running sum of all gradients so far."""
    if m is None or m.carry is None:
        return []
    share, tensors = m.carry
    if not math.isfinite(share) or share < CARRIED:
        return []
    return [make("optim.grad_not_zeroed", "error", "optimizer",
                 f"the gradient the optimizer stepped with at the second update still held the first update's: "
                 f"the leftover .grad (swapped for a marker of its norm in {tensors} tensors) makes up "
                 f"{share:.0%} of the second step's gradient norm, where a zeroed .grad leaves ~0%", CHECK,
                 hint="call `optimizer.zero_grad()` once per update (before `loss.backward()` or after "
                      "`optimizer.step()`): without it .grad sums every batch since the start and each update "
                      "follows that sum", carried_share=share, tensors=tensors)]


def judge_schedule_steps(m: GradRuleMeasurement | None) -> list[Finding]:
    """An LR scheduler stepped more often than the optimizer in one update: the schedule runs k times
    faster than the updates (its warm-up and decay in micro-batches, not optimizer steps)."""
    if m is None or m.error or m.steps < 1 or m.scheduler_steps <= m.steps:
        return []
    k = m.scheduler_steps / m.steps
    return [make("optim.schedule_too_fast", "warning", "optimizer",
                 f"one update stepped the LR scheduler {m.scheduler_steps} times and the optimizer {m.steps}: the "
                 f"schedule advances {k:g}x per update, so its warm-up and decay end {k:g}x sooner than "
                 f"counted in updates", CHECK,
                 hint="step the scheduler only after an optimizer update (`if (i + 1) % accumulation == 0`, "
                      "`if accelerator.sync_gradients`); if the schedule was sized in micro-batches on purpose "
                      "(num_training_steps = batches x epochs), this is as meant",
                 scheduler_steps=m.scheduler_steps, optimizer_steps=m.steps)]


def judge_clip_order(m: GradRuleMeasurement | None) -> list[Finding]:
    """The gradients left after the update are the step's own, shortened: `clip_grad_norm_` ran after
    `optimizer.step()`, so the step used the unclipped gradients and the clipping limits nothing."""
    if m is None or m.after_step is None or not m.steps:
        return []
    cosine, ratio = m.after_step
    if not (math.isfinite(cosine) and math.isfinite(ratio)) or cosine < 0.999 or ratio > 0.98 or ratio <= 0:
        return []
    return [make("optim.clip_after_step", "error", "optimizer",
                 f"the optimizer stepped with gradients of norm {m.step_norm:.3g}; after the step the same gradients "
                 f"(cosine {cosine:.4f}) were scaled to {ratio * m.step_norm:.3g}: they were clipped after "
                 "`optimizer.step()`, so the clipping never limits an update", CHECK,
                 hint="call `clip_grad_norm_` between `loss.backward()` and `optimizer.step()` (with AMP, after "
                      "`scaler.unscale_(optimizer)`)", step_grad_norm=m.step_norm, after_ratio=ratio, cosine=cosine)]
