"""Overfit one batch: regularisation off, N updates on the golden batch, loss and gradient norms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..._tensor import as_float
from ...checks._util import unigram_entropy
from ...probes.step_rates import StepRates
from ...records.optimisation import CurveMeasurement
from ...trace.layout import read_layout
from .._seed import seed_everything
from ..context import Context
from ._train import regularisation_off, update_step

__all__ = ["measure_overfit", "overfit_at"]


def measure_overfit(ctx: Context) -> CurveMeasurement:
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    reg = regularisation_off(model, optimizer)
    before = _fingerprint(model)
    losses: list[float] = []
    norms: list[float] = []
    clip: list[float] = []

    def grab(stage: str, value: Any, /, **meta: Any) -> Any:
        if stage == "grad.norm":
            norms.append(float(value))
            if "max_norm" in meta:
                clip.append(float(meta["max_norm"]))
        return value

    seed_everything(ctx.seed)
    error = None
    lrs: list[float] = []
    # the rate of each group when step() runs: the schedule at work
    with StepRates(optimizer, measure=False).attached_to() as rates:
        for _ in range(ctx.budget.overfit_steps):
            try:
                out = update_step(p, model, optimizer, ctx.batch(), grab)
            except Exception as exc:  # the run under test may crash: that is a result, not our crash
                error = f"{type(exc).__name__}: {exc}"
                break
            loss = as_float(out.loss)
            losses.append(loss)
            lrs.append(max(float(g["lr"] or 0.0) for g in optimizer.param_groups))
            if not math.isfinite(loss):
                break
    trace = ctx.golden().trace
    h = None
    view = read_layout(trace)  # targets [B, K, T'] whatever the pipeline's layout, ignored ones masked
    if view.targets is not None:
        m = view.mask if view.mask is not None else np.ones(view.targets.shape, bool)
        h = unigram_entropy(view.targets, m) if m.any() else None
    report = CurveMeasurement(losses=losses, grad_norms=norms, steps=len(losses), unigram_entropy=h,
                              regularisation=reg, error=error, lrs=lrs, params_moved=_fingerprint(model) != before,
                              step_lrs=rates.step_lrs)
    if clip:
        report.regularisation["clip_max_norm"] = int(clip[0]) if clip[0].is_integer() else clip[0]  # type: ignore[assignment]
    return report


def _fingerprint(model: torch.nn.Module) -> list[tuple[float, float]]:
    """Per parameter (sum, sum of squares) in float64: a change anywhere changes it; no copy is kept."""
    with torch.no_grad():
        return [(float(q.double().sum()), float(q.double().square().sum())) for q in model.parameters()]


def overfit_at(ctx: Context, lr: float) -> list[float]:
    """The overfit run again, at `lr`, with a plain update loop (regularisation off, no schedule):
    does one batch memorise at some rate? Then the path is connected, whatever the configured rate
    does in so few steps; at no rate tried, the model's capacity is in question."""
    import copy

    from .lr_sweep import train_at

    state = copy.deepcopy(ctx.fresh_model().state_dict())
    return train_at(ctx, state, lr, ctx.budget.overfit_steps, regularisation=False)
