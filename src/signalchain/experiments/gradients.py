"""Gradient reach: one backward on the golden batch, and where the gradient stops if it does.

Measures, per parameter: trainable or frozen, in an optimizer group or not, used in the forward,
gradient present / all zero / absent; whether the loss has a graph and depends on the logits; and
every graph break (detach, integer cast, no_grad, numpy round trip) with its file:line and stage.
"""

from __future__ import annotations

from typing import Any

import torch

from ..checks.results import GradientReport, ParamGrad
from ..pipeline import as_step_output
from ..trace import record, tap
from ._graph import GraphWatch
from ._seed import seed_everything
from .context import Context

__all__ = ["measure_gradients"]


def _module_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def measure_gradients(ctx: Context) -> GradientReport:
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    in_opt = {id(q) for g in optimizer.param_groups for q in g["params"]}
    watch = GraphWatch()
    last_forward: dict[str, int] = {}
    names = {m: n for n, m in model.named_modules()}

    def hook(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        last_forward[names.get(module, "?")] = watch.tick()

    handles = [m.register_forward_hook(hook) for m in model.modules()]

    def watched_tap(stage: str, value: Any, /, **meta: Any) -> Any:
        watch.on_tap(stage, value)
        watch.paused = True  # recording copies the value to numpy: that is ours, not a break
        try:
            return tap(stage, value, **meta)
        finally:
            watch.paused = False

    model.train()
    seed_everything(ctx.seed)
    try:
        with record(values=False) as trace, watch:
            out = as_step_output(p.step(model, ctx.batch(), watched_tap))
    finally:
        for h in handles:
            h.remove()
    loss = out.loss
    is_tensor = isinstance(loss, torch.Tensor)
    requires = bool(is_tensor and loss.requires_grad and loss.grad_fn is not None)
    depends: bool | None = None
    if requires and isinstance(out.logits, torch.Tensor) and out.logits.requires_grad:
        (g,) = torch.autograd.grad(loss, out.logits, retain_graph=True, allow_unused=True)
        depends = g is not None and bool(torch.isfinite(g).any()) and float(g.abs().max()) > 0
    elif requires and isinstance(out.logits, torch.Tensor):
        depends = False
    if requires:
        loss.backward()
    params = []
    for name, q in model.named_parameters():
        module = _module_of(name)
        if q.grad is None:
            state = "none"
        elif not bool(torch.isfinite(q.grad).all()) or float(q.grad.abs().max()) > 0:
            state = "ok"
        else:
            state = "zero"
        params.append(ParamGrad(name=name, module=module, numel=q.numel(), requires_grad=q.requires_grad,
                                in_optimizer=id(q) in in_opt, used=module in last_forward or module == "",
                                grad=state, grad_norm=float(q.grad.norm()) if q.grad is not None else 0.0,
                                last_forward=last_forward.get(module, -1)))
    stage_grad = {r.name: bool(r.meta["requires_grad"]) for r in trace if "requires_grad" in r.meta}
    return GradientReport(loss_is_tensor=is_tensor, loss_requires_grad=requires, loss_depends_on_logits=depends,
                          params=params, breaks=watch.breaks, stage_requires_grad=stage_grad, stages=trace.names())
