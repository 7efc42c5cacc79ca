"""One update of a model the way the pipeline's own training loop does it, and regularisation off."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ...pipeline import Pipeline, StepOutput, as_step_output, capabilities
from ...probes.step_rates import rate_of
from ...trace import Tap

__all__ = ["update_step", "regularisation_off", "configured_lrs", "rate_of", "no_tap", "norm_of", "total_grad_norm",
           "sets_own_rate"]


def no_tap(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


def autocast_for(model: torch.nn.Module, dtype: Any) -> Any:
    """Autocast to `dtype` on the device type the model's parameters live on (a no-op context for None)."""
    if dtype is None:
        return contextlib.nullcontext()
    first = next(model.parameters(), None)
    return torch.autocast(first.device.type if first is not None else "cpu", dtype=dtype)


def update_step(pipeline: Pipeline, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Any,
                tap: Tap = no_tap) -> StepOutput:
    """`train_step` when the pipeline has one (its own backward, clipping, scaler and schedule);
    else forward, backward (scaled when the pipeline names a scaler), step and zero_grad."""
    if "train_step" in capabilities(pipeline):
        return as_step_output(pipeline.train_step(model, optimizer, batch, tap))
    model.train()
    dtype = getattr(pipeline, "amp_dtype", None)
    with autocast_for(model, dtype):
        out = as_step_output(pipeline.step(model, batch, tap))
    scaler = getattr(pipeline, "scaler", None)
    (scaler.scale(out.loss) if scaler is not None else out.loss).backward()
    if scaler is not None:
        scaler.unscale_(optimizer)
    tap("grad.norm", total_grad_norm(model))
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
        tap("amp.scale", scaler.get_scale())
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return out


def norm_of(tensors: list[torch.Tensor]) -> float:
    """The 2-norm of several tensors together, in float32, one fused kernel per device and dtype
    (inf/nan when any value is not finite); 0 for none."""
    if not tensors:
        return 0.0
    return float(torch.stack(torch._foreach_norm([t.detach().float() for t in tensors])).norm())


def total_grad_norm(model: torch.nn.Module) -> float:
    """The 2-norm of all gradients together (inf/nan when any is not finite)."""
    return norm_of([q.grad for q in model.parameters() if q.grad is not None])


def regularisation_off(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Dropout to 0 and weight decay to 0, so an overfit test measures the optimisation path only."""
    n_dropout = 0
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0:
            m.p = 0.0
            n_dropout += 1
        for attr in ("dropout", "dropout_p"):
            if isinstance(getattr(m, attr, None), float) and getattr(m, attr) > 0:
                setattr(m, attr, 0.0)
                n_dropout += 1
    n_decay = 0
    for group in optimizer.param_groups:
        if group.get("weight_decay", 0):
            group["weight_decay"] = 0.0
            n_decay += 1
    return {"dropout_modules": n_dropout, "decay_groups": n_decay}


def configured_lrs(optimizer: torch.optim.Optimizer) -> list[float | None]:
    """The learning rate each group is configured with (before a scheduler's warm-up factor); None for
    a group whose optimizer computes its rate itself at each step (transformers' Adafactor with
    `relative_step=True` has `lr=None`: min(1e-2, 1/sqrt(step)) times each tensor's RMS)."""
    return [rate_of(g.get("initial_lr", g.get("lr"))) for g in optimizer.param_groups]


def sets_own_rate(optimizer: torch.optim.Optimizer) -> bool:
    """Every group's rate is computed by the optimizer itself: no rate can be set from outside."""
    return bool(optimizer.param_groups) and all(r is None for r in configured_lrs(optimizer))
