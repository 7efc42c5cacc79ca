"""Learning rate problems in HF fine-tuning code: a rate scaled up by a recipe's rule, a warm-up
lambda without its clamp, and a text-encoder rate ratio written the wrong way round."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ._registry import fault
from ._util import attach_scheduler

if TYPE_CHECKING:
    from ..pipeline import HFBedPipeline

SECTION = "Learning rate problems"


@fault("scale_lr_by_world_size", "learning_rate", "the learning rate is too high: the loss oscillates and diverges",
       SECTION, ["optim.lr_too_large", "loss.spike"], "optimizer", symptom="unstable")
def _scale_lr_by_world_size(p: HFBedPipeline) -> None:
    # Bug: the `--scale_lr` block of a diffusers training script was copied along:
    # lr * gradient_accumulation_steps (8) * train_batch_size (4) * num_processes (4). The rate the
    # run was tuned at becomes 128x larger (0.38 for AdamW), and every update overshoots.
    accumulation, processes = 8, 4
    p.lr = p.lr * accumulation * p.batch_size * processes


@fault("warmup_lambda_unclamped", "learning_rate", "the schedule makes the parameters explode",
       SECTION, ["grad.exploding", "loss.spike", "optim.lr_too_large"], "optimizer", symptom="unstable")
def _warmup_lambda_unclamped(p: HFBedPipeline) -> None:
    warmup_ratio = 0.1

    def schedule(opt: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        # Bug: a hand-written replacement for `get_linear_schedule_with_warmup` keeps only its
        # rising half, `(step + 1) / warmup_steps`, without the `min(1, ...)` and the decay, and is
        # handed `warmup_ratio` (0.1) where a step count belongs: the lr is 10x the peak at step 0
        # and grows by another 10x the peak every step.
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda step: (step + 1) / warmup_ratio)

    attach_scheduler(p, schedule)


@fault("text_lr_ratio_inverted", "learning_rate", "one parameter group's learning rate is far too high",
       SECTION, ["optim.lr_too_large"], "optimizer", symptom="ignores-caption")
def _text_lr_ratio_inverted(p: HFBedPipeline) -> None:
    # Bug: the config means "the text encoder trains 10x slower than the decoder" and writes it as
    # the ratio decoder/text (`text_lr_scale: 10`), which `param_groups` multiplies: T5 gets 10x the
    # decoder's rate (100x what was meant) and its embeddings are thrown around every step.
    p.text_lr_scale = 10.0
