"""Learning rate problems: a rate that is too high, a schedule that blows up, no warm-up.

A learning rate that is too low looks like a frozen loss; it lives with the flat-loss faults
(`lr_too_small`). Here the rate is too high in three ways the method names: oscillation and
divergence, parameter explosion, and a sudden early spike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ._registry import fault

if TYPE_CHECKING:
    from ..model import MusicLM
    from ..pipeline import ReferencePipeline

SECTION = "Learning rate problems"


@fault("lr_too_large", "learning_rate", "the learning rate is too high: the loss oscillates and diverges",
       SECTION, ["optim.lr_too_large", "loss.spike"], "optimizer", symptom="unstable")
def _lr_too_large(p: ReferencePipeline) -> None:
    # Bug: the lr of an SGD recipe (0.5) is kept when the optimiser is switched to AdamW, whose
    # step moves every weight by about lr per update: the loss jumps around and climbs.
    p.cfg.lr = 0.5


@fault("lr_schedule_explodes", "learning_rate", "the schedule makes the parameters explode",
       SECTION, ["grad.exploding"], "optimizer", symptom="unstable")
def _lr_schedule_explodes(p: ReferencePipeline) -> None:
    def build_optimizer(model: MusicLM) -> torch.optim.Optimizer:
        opt = torch.optim.AdamW(p.param_groups(model), lr=p.cfg.lr, betas=p.cfg.betas)
        # Bug: "halve the lr every step" written as `gamma = 1 / decay` (2.0) instead of
        # `gamma = decay` (0.5): the lr doubles at every step, the weights blow up and the
        # gradients grow with them until they overflow.
        decay = 0.5
        p._schedulers[opt] = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=1 / decay)
        return opt

    p.build_optimizer = build_optimizer  # type: ignore[method-assign]


@fault("no_warmup_large_lr", "learning_rate", "a large learning rate without warm-up spikes the loss early",
       SECTION, ["loss.spike"], "optimizer", symptom="unstable")
def _no_warmup_large_lr(p: ReferencePipeline) -> None:
    # Bug: the peak lr of a large-batch recipe (2e-2) is copied, but its warm-up was given in
    # epochs (0.1) and truncated to an int step count: 0 warm-up steps. The first full-size
    # Adam updates (whose second-moment estimate is still one sample) throw the loss up.
    p.cfg.lr = 2e-2
    p.cfg.warmup_steps = int(0.1)
