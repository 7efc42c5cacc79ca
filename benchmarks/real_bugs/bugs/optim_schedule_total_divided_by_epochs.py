"""A linear-decay schedule sized `len(train_dataloader) // num_train_epochs`: the LR reaches 0 early and stays.

blueprints-for-text-analytics-python/blueprints-text#7: the sentiment fine-tuning notebook computed the
scheduler's total steps as `t_total = len(train_dataloader) // num_train_epochs` and passed it to
`get_linear_schedule_with_warmup(optimizer, num_warmup_steps=0, num_training_steps=t_total)`; the
training ran `num_train_epochs` full epochs, so the rate decayed to 0 within the first epoch and the
rest of the run did not learn ("the loss just doesn't decrease"). The fix (the maintainers' commit):
`t_total = len(train_dataloader) * num_train_epochs`. Reproduced in a user's own loop around the
reference model: 64 batches per epoch, 8 epochs planned, transformers' linear schedule without warmup;
`64 // 8 = 8` steps instead of `64 * 8 = 512`.
"""

from __future__ import annotations

import torch

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="optim_schedule_total_divided_by_epochs",
    thread="https://github.com/blueprints-for-text-analytics-python/blueprints-text/issues/7",
    library="transformers (get_linear_schedule_with_warmup) + torch", idiom="own loop, linear decay schedule, no warmup",
    cls="optimiser-mechanics",
    cause="num_training_steps = len(train_dataloader) // num_train_epochs: the linear decay reaches LR 0 after "
          "8 of the 512 steps the run takes and the LR stays 0",
    fix="num_training_steps = len(train_dataloader) * num_train_epochs",
    stages=("optimizer",), cause_ids=("optim.schedule_ends_early", "optim.lr_too_small", "history.lr_schedule",
                                      "optim.lr"),
    symptom="flat-loss")

EPOCHS = 8


class ScheduledLoop(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed

    def steps_per_epoch(self) -> int:
        return self.cfg.train_size // self.cfg.batch_size  # len(train_dataloader)

    def build_optimizer(self, model):
        from transformers import get_linear_schedule_with_warmup

        opt = torch.optim.AdamW(self.param_groups(model), lr=self.cfg.lr, betas=self.cfg.betas)
        n = self.steps_per_epoch()
        t_total = n * EPOCHS if self.fixed else n // EPOCHS  # the bug: // for *
        self._schedulers[opt] = get_linear_schedule_with_warmup(opt, num_warmup_steps=0, num_training_steps=t_total)
        return opt


def pipeline(fixed: bool) -> ScheduledLoop:
    return ScheduledLoop(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """The LR each of the first 16 updates used, and the loss over them, on the golden batch."""
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
    losses = [float(p.train_step(model, opt, batch).loss) for _ in range(16)]
    zero = sum(u == 0.0 for u in used)
    return zero >= 4, (f"LR factor over 16 updates {[round(u, 2) for u in used]} ({zero} at 0, planned run "
                       f"{p.steps_per_epoch() * EPOCHS} updates); loss {losses[0]:.3f} -> {losses[-1]:.3f}")
