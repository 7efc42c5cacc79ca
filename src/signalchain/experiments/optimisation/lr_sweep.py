"""Learning-rate range test from copies of the same initial state, then a probe above the best.

Each learning rate starts from the same weights and a fresh optimizer of the pipeline's own kind;
group ratios are kept, the pipeline's scheduler is bypassed. The probe follows the Deep Learning
Tuning Playbook's advice: look at the loss and the full gradient norm just above the best rate.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

from ..._tensor import as_float
from ...pipeline import as_step_output
from ...records.optimisation import SweepMeasurement
from .._seed import seed_everything
from ..context import Context
from ._train import configured_lrs, no_tap, regularisation_off, sets_own_rate, total_grad_norm

__all__ = ["measure_lr_sweep", "train_at"]


def _set_lr(optimizer: torch.optim.Optimizer, lr: float, configured: list[float | None]) -> None:
    """Every group at `lr` times its configured share of the top rate (all at `lr` when every
    configured rate is 0: a zero rate says nothing about the groups' ratios). A group whose optimizer
    computes its own rate (lr None) keeps it: no rate set from outside reaches it."""
    top = max((c for c in configured if c is not None), default=0.0)
    for group, base in zip(optimizer.param_groups, configured):
        if base is not None:
            group["lr"] = lr * (base / top) if top > 0 else lr


def train_at(ctx: Context, state: dict, lr: float, steps: int, norms: list[float] | None = None,
             regularisation: bool = True) -> list[float]:
    """Losses of `steps` plain updates at `lr` from `state`, then the loss after the last update."""
    p = ctx.pipeline
    model = ctx.fresh_model()
    model.load_state_dict(state)
    optimizer = p.build_optimizer(model)
    _set_lr(optimizer, lr, configured_lrs(optimizer))
    if not regularisation:
        regularisation_off(model, optimizer)
    model.train()
    losses = []
    seed_everything(ctx.seed)
    for _ in range(steps + 1):
        out = as_step_output(p.step(model, ctx.batch(), no_tap))
        loss = as_float(out.loss)
        losses.append(loss)
        if len(losses) == steps + 1 or not math.isfinite(loss) or not out.loss.requires_grad:
            break
        out.loss.backward()
        if norms is not None:
            norms.append(total_grad_norm(model))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return losses


def measure_lr_sweep(ctx: Context) -> SweepMeasurement:
    model = ctx.fresh_model()
    state = copy.deepcopy(model.state_dict())
    optimizer = ctx.pipeline.build_optimizer(model)
    if sets_own_rate(optimizer):
        # A relative step (transformers' Adafactor, relative_step=True): the optimizer computes every
        # group's rate from its step count and each tensor's RMS and ignores group["lr"]; a sweep would
        # run the same updates at every "rate". Sweeping a fixed-rate variant instead would judge an
        # optimizer the user does not run, and there is no configured rate to place against it.
        return SweepMeasurement(lrs=[], losses=[], initial=math.nan, configured=0.0,
                                extra={"own_rate": type(optimizer).__name__,
                                       "relative_step": [g.get("relative_step") for g in optimizer.param_groups]})
    configured = max((c for c in configured_lrs(optimizer) if c is not None), default=0.0)
    lrs = sorted(set(np.logspace(-6, 0, ctx.budget.sweep_lrs).tolist()) | ({configured} if configured > 0 else set()))
    losses = [train_at(ctx, state, lr, ctx.budget.sweep_steps) for lr in lrs]
    initial = losses[0][0]
    report = SweepMeasurement(lrs=lrs, losses=losses, initial=initial, configured=configured)
    finals = [min(ls[-2:]) if all(math.isfinite(x) for x in ls) else math.inf for ls in losses]
    if all(math.isfinite(f) for f in finals) or any(math.isfinite(f) for f in finals):
        best = lrs[int(np.argmin(finals))]
        report.probe_lr = best * 3.0
        norms: list[float] = []
        report.probe_losses = train_at(ctx, state, report.probe_lr, ctx.budget.probe_steps, norms)
        report.probe_grad_norms = norms
    return report
