"""Lightning manual optimisation: the LR scheduler from `configure_optimizers` is never stepped.

voicepaw/so-vits-svc-fork#291 (closes #292): after the rewrite to Lightning with
`automatic_optimization = False`, the learning-rate decay "was not working": in manual
optimisation Lightning ignores the scheduler's `interval` and never calls `lr_scheduler.step()`
itself (since 1.3), so the LR stayed at its initial value for the whole run. The fix: call
`step()` on each scheduler from `self.lr_schedulers()` in the training step. Reproduced as a
LightningModule around the reference model with manual optimisation (zero_grad, manual_backward,
clip_gradients, step) and the user's warmup schedule (LambdaLR, `interval: "step"`): without the
scheduler step the LR stays at its first warmup value, lr / 10, for the whole run. The findings are
signalchain's Lightning callback's and `signalchain.history` on the `metrics.csv` (loss and lr).
"""

from __future__ import annotations

import functools

from real_bugs.bed import RealBug
from real_bugs.bugs.optim_control_dropout_val_below_train import fit, loaders, make_module, read_metrics
from signalchain.reference import ReferencePipeline

BUG = RealBug(
    name="optim_lightning_manual_no_scheduler_step", thread="https://github.com/voicepaw/so-vits-svc-fork/pull/291",
    library="lightning", idiom="LightningModule, automatic_optimization=False, warmup LambdaLR",
    cls="optimiser-mechanics",
    cause="in manual optimisation Lightning does not step the configured scheduler and the training_step "
          "never calls lr_schedulers().step(): the LR stays at the warmup's first value (lr/10)",
    fix="call self.lr_schedulers().step() after opt.step() in training_step",
    stages=("optimizer",), cause_ids=("optim.scheduler_not_stepped", "history.lr_schedule", "optim.lr_too_small"))

STEPS, EVERY = 40, 20


@functools.lru_cache(maxsize=4)
def run(fixed: bool, seed: int) -> tuple[list[dict], dict]:
    p = ReferencePipeline()
    train, valid = loaders(p, seed, n_train=STEPS)
    module = make_module(p, seed, manual=True, step_scheduler=fixed)
    found, folder = fit(module, train, valid, seed, STEPS, EVERY, clip=False)
    return found, read_metrics(folder)


def findings(fixed: bool, seed: int) -> list[dict]:
    return run(fixed, seed)[0]


def shows(fixed: bool) -> tuple[bool, str]:
    """The logged LR: stuck at its first value (bug) or warming up to the configured peak (fixed)."""
    _, m = run(fixed, 0)
    lrs = [v for _, v in sorted(m["lr"])]
    peak = 2e-3
    stuck = max(lrs) <= 1.01 * lrs[0] and lrs[-1] < 0.5 * peak
    losses = [v for _, v in sorted(m["train_loss"])]
    return stuck, (f"lr over {len(lrs)} steps {lrs[0]:.2g} -> {lrs[-1]:.2g} (configured peak {peak:g}); "
                   f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
