"""Gradient reach: one backward on the golden batch, and where the gradient stops if it does.

Measures, per parameter: trainable or frozen, in an optimizer group or not, used in the forward
(when, relative to the taps, and whether with grad enabled), gradient present / all zero / absent;
whether the loss has a graph and depends on the model's output; and every graph break (detach,
integer cast, no_grad, numpy round trip) with its file:line and stage.

"Depends on the output" is asked of the graph, not of one tensor: a model may compute its loss from
its logits before reshaping them and return the reshaped view (HF's `MusicgenForCausalLM`: the loss
from `[B, K, T, V]`, the logits returned as `[B*K, T, V]`), so the returned logits are a sibling of
the loss's input, not its ancestor. The logits are followed back through view-like ops (reshape,
transpose, slice, contiguous…) to the op that produced them; the loss depends on the output when
its backward delivers a non-zero gradient to that op. Logits returned detached are traced to the
module output they share storage with.
"""

from __future__ import annotations

from typing import Any

import torch

from ...pipeline import as_step_output
from ...probes.grad_arrivals import GradArrivals
from ...probes.graph_watch import GraphWatch
from ...probes.module_calls import ModuleCalls
from ...probes.tensors import flat_tensors
from ...records.optimisation import GradientMeasurement, ParamGrad
from ...trace import record, tap
from .._seed import seed_everything
from ..context import Context

__all__ = ["measure_gradients"]


def _module_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


#: Autograd nodes that only re-view, copy or cast their one input: they produce no new values.
_VIEWS = {"View", "ReshapeAlias", "UnsafeView", "Transpose", "Permute", "Expand", "Slice", "Select",
          "Clone", "ToCopy", "Alias", "Squeeze", "Unsqueeze", "AsStrided", "T", "Unflatten", "Contiguous",
          "Narrow", "Unfold", "Split", "SplitWithSizes", "Unbind", "Chunk"}


def _kind(node: Any) -> str:
    return node.name().rstrip("0123456789").removesuffix("Backward")


def _producer(node: Any) -> Any:
    """The first node below `node` that is not a view or copy: the op whose values the logits are."""
    while node is not None and _kind(node) in _VIEWS:
        nexts = [n for n, _ in node.next_functions if n is not None]
        if len(nexts) != 1:
            break
        node = nexts[0]
    return node


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # a tensor subclass without storage
        return None


def _direct(loss: torch.Tensor, logits: torch.Tensor) -> bool:
    """The gradient of the loss with respect to the returned logits is non-zero."""
    (g,) = torch.autograd.grad(loss, logits, retain_graph=True, allow_unused=True)
    return g is not None and bool(torch.isfinite(g).any()) and float(g.abs().max()) > 0


def measure_gradients(ctx: Context) -> GradientMeasurement:
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    in_opt = {id(q) for g in optimizer.param_groups for q in g["params"]}
    watch = GraphWatch()
    last_forward: dict[str, int] = {}
    first_forward: dict[str, int] = {}
    grad_enabled: dict[str, bool] = {}
    produced: dict[int, Any] = {}  # storage of a module output -> its autograd node (latest)

    def hook(name: str, module: torch.nn.Module, output: Any) -> None:
        last_forward[name] = tick = watch.tick()
        first_forward.setdefault(name, tick)
        grad_enabled[name] = grad_enabled.get(name, False) or torch.is_grad_enabled()
        for t in flat_tensors(output):
            if t.grad_fn is not None and (ptr := _storage(t)) is not None:
                produced[ptr] = t.grad_fn

    model.train()
    seed_everything(ctx.seed)
    with ModuleCalls(model, on_call=hook).attached_to(), watch.attached():
        with record(values=False) as trace, watch:
            out = as_step_output(p.step(model, ctx.batch(), watch.tap_wrapper(tap)))
    loss = out.loss
    is_tensor = isinstance(loss, torch.Tensor)
    requires = bool(is_tensor and loss.requires_grad and loss.grad_fn is not None)
    depends: bool | None = None
    via: str | None = None
    logits = out.logits if isinstance(out.logits, torch.Tensor) else None
    anchor = None
    if requires and logits is not None:
        if logits.requires_grad and _direct(loss, logits):
            depends, via = True, "logits"
        elif logits.grad_fn is not None:
            anchor, via = logits.grad_fn, "graph"
        elif (ptr := _storage(logits)) is not None and ptr in produced:
            anchor, via = produced[ptr], "detached"
        else:
            depends = False if logits.requires_grad else None  # a leaf, or values of unknown origin
    with GradArrivals(_producer(anchor) if anchor is not None else None).attached_to() as arrivals:
        if requires:
            loss.backward()
    if anchor is not None:
        depends = bool(arrivals.reached) and max(arrivals.reached) > 0
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
                                last_forward=last_forward.get(module, -1), first_forward=first_forward.get(module, -1),
                                grad_enabled=grad_enabled.get(module)))
    stage_grad = {r.name: bool(r.meta["requires_grad"]) for r in trace if "requires_grad" in r.meta}
    return GradientMeasurement(loss_is_tensor=is_tensor, loss_requires_grad=requires, loss_depends_on_logits=depends,
                          params=params, breaks=watch.breaks, stage_requires_grad=stage_grad, stages=trace.names(),
                          stage_order=watch.stage_order, depends_via=via)
