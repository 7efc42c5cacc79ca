"""Parameter update: snapshot, run the pipeline's own update a few times, measure what moved, and
what each step did per parameter group at the configured rate (`probes.step_rates.StepRates`)."""

from __future__ import annotations

import torch

from ...probes.step_grads import StepGrads
from ...probes.step_rates import StepRates
from ...records.optimisation import UpdateMeasurement
from .._seed import seed_everything
from ..context import Context
from ._train import configured_lrs, rate_of, update_step

__all__ = ["measure_update"]


def measure_update(ctx: Context) -> UpdateMeasurement:
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    configured = configured_lrs(optimizer)
    before = {n: q.detach().clone() for n, q in model.named_parameters()}
    had_grad: dict[str, bool] = {n: False for n in before}
    params = dict(model.named_parameters())
    scales: list[float] = []
    seed_everything(ctx.seed)

    def grab(stage: str, value: object, /, **meta: object) -> object:
        # train_step taps grad.norm after backward: that is when gradients exist, before zero_grad.
        if stage == "grad.norm":
            for n, q in params.items():
                if q.grad is not None and bool((q.grad != 0).any()):
                    had_grad[n] = True
        if stage == "amp.scale":
            scales.append(float(value))  # type: ignore[arg-type]
        return value

    effective = [rate_of(g.get("lr")) for g in optimizer.param_groups]  # None: a relative step
    with StepGrads(optimizer).attached_to() as step_grads, \
            StepRates(optimizer, {id(q): n for n, q in params.items()}).attached_to() as rates:
        for _ in range(ctx.budget.update_steps):
            update_step(p, model, optimizer, ctx.batch(), grab)
    at_step = step_grads.at_step
    changed = {}
    layer: dict[str, list[float]] = {}
    with torch.no_grad():
        for n, q in model.named_parameters():
            d = float((q - before[n]).norm())
            ref = float(before[n].norm())
            changed[n] = d / ref if ref > 0 else d
            layer.setdefault(n.rsplit(".", 1)[0], []).append(changed[n])
    return UpdateMeasurement(
        steps=ctx.budget.update_steps,
        changed=changed,
        had_grad=had_grad,
        configured_lr=configured,
        effective_lr=effective,
        scaler_scales=scales,
        at_step=at_step,
        layer_ratio={k: max(v) for k, v in layer.items()},
        groups=rates.groups(),
        below_resolution=rates.below_resolution(),
    )
