"""Gradient accumulation that averages per-micro-batch token means (the 2024 transformers GA bug).

huggingface/transformers#34191 (with #34198): the Trainer computed each micro-batch's loss as the
mean cross-entropy over *its own* non-padded tokens and divided it by `gradient_accumulation_steps`.
`(x1/n1 + x2/n2)/2 != (x1 + x2)/(n1 + n2)` when the micro-batches hold different numbers of
tokens, so `bsz=1, ga=32` trained a different objective than `bsz=32, ga=1` (tokens of short
sequences weigh more) and its loss curve sat above the full-batch one. The fix: sum the token
losses of each micro-batch and divide by the number of label tokens in the whole accumulated batch
(`num_items_in_batch`). Reproduced in a user's own loop around the reference model with
per-device batch 1 and 8 accumulation steps; the golden batch's last clip is shorter than the crop,
so its micro-batch holds 240 counted tokens against 400.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from real_bugs.bed import RealBug
from signalchain import StepOutput
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="optim_ga_token_mean", thread="https://github.com/huggingface/transformers/pull/34191",
    library="transformers", idiom="own loop, per-device batch 1 x 8 accumulation steps", cls="optimiser-mechanics",
    cause="each micro-batch's loss is its own token mean divided by the accumulation steps, so micro-batches "
          "with fewer counted tokens weigh more than the full-batch token mean gives them",
    fix="sum each micro-batch's token losses and divide by the counted tokens of the whole accumulated batch",
    stages=("loss", "optimizer"),
    cause_ids=("optim.grad_not_loss_grad", "optim.accumulation_normalisation", "loss.accumulation_mismatch"),
    symptom="flat-loss")

ACCUM = 8


def no_tap(stage, value, /, **meta):
    return value


def micro_batches(batch, n: int) -> list:
    """The batch split into `n` equal micro-batches (same seed: each is a batch the loader could give)."""
    size = len(batch) // n
    return [replace(batch, clips=batch.clips[i:i + size], captions=batch.captions[i:i + size],
                    metadata=batch.metadata[i:i + size]) for i in range(0, size * n, size)]


def tap_combined(tap, outs: list[StepOutput], loss: torch.Tensor) -> StepOutput:
    """What the whole accumulated batch went through, tapped once (logits, targets, mask, loss)."""
    logits = torch.cat([o.logits.detach() for o in outs])
    targets = torch.cat([o.targets for o in outs])
    mask = torch.cat([o.mask for o in outs])
    tap("targets", targets)
    tap("logits", logits)
    tap("mask.loss", mask)
    tap("loss", loss)
    return StepOutput(loss=loss, logits=logits, targets=targets, mask=mask)


class AccumLoop(ReferencePipeline):
    accum = ACCUM

    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def accumulate(self, model, batch) -> tuple[list[StepOutput], torch.Tensor]:
        """Backward over the micro-batches; returns their outputs and the loss the user logs."""
        outs = [self.step(model, b, no_tap) for b in micro_batches(batch, self.accum)]
        total = sum(o.mask.sum() for o in outs)  # counted tokens of the accumulated batch (HF: num_items_in_batch)
        logged = torch.zeros(())
        for out in outs:
            if self.fixed:  # the fix: token sum over the tokens of the whole accumulated batch
                loss = out.loss * out.mask.sum() / total
            else:  # the bug: this micro-batch's token mean, divided by the number of micro-batches
                loss = out.loss / self.accum
            loss.backward()
            logged = logged + loss.detach()
        return outs, logged

    def train_step(self, model, optimizer, batch, tap=no_tap) -> StepOutput:
        model.train()
        outs, logged = self.accumulate(model, batch)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.cfg.clip_grad)
        tap("grad.norm", grad_norm)
        optimizer.step()
        self.scheduler_for(optimizer).step()
        optimizer.zero_grad(set_to_none=True)
        out = tap_combined(tap, outs, logged)
        out.extras["grad_norm"] = float(grad_norm)
        return out


def pipeline(fixed: bool) -> AccumLoop:
    return AccumLoop(fixed)


def flat_grad(model) -> torch.Tensor:
    return torch.cat([q.grad.flatten() for q in model.parameters() if q.grad is not None])


def shows(fixed: bool) -> tuple[bool, str]:
    """The accumulated gradient against the gradient of the token mean over the whole batch."""
    p = pipeline(fixed)
    model = p.build_model(0)
    batch = p.golden_batch(0)
    parts = micro_batches(batch, p.accum)
    outs = [p.step(model, b) for b in parts]
    total = sum(o.mask.sum() for o in outs)
    (sum(o.loss * o.mask.sum() for o in outs) / total).backward()  # every counted token weighs 1/total
    want = flat_grad(model).clone()
    model.zero_grad(set_to_none=True)
    p.accumulate(model, batch)
    got = flat_grad(model)
    rel = float((got - want).norm() / want.norm())
    counts = [int(o.mask.sum()) for o in outs]
    return rel > 1e-3, f"accumulated gradient off the full-batch token-mean gradient by {rel:.2%} (tokens per micro-batch {counts})"
