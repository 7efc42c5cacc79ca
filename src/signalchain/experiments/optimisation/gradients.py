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

import numpy as np
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


def _scale_of(scaler: Any) -> float | None:
    try:
        return float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else None
    except Exception:  # a scaler-like object without the GradScaler API: measure unscaled
        return None


def _grad_state(q: torch.Tensor) -> str:
    if q.grad is None:
        return "none"
    return "ok" if not bool(torch.isfinite(q.grad).all()) or float(q.grad.abs().max()) > 0 else "zero"


def _common(a: str, b: str) -> int:
    """How many leading module names two dotted parameter names share."""
    n = 0
    for x, y in zip(a.split(".")[:-1], b.split(".")[:-1]):
        if x != y:
            break
        n += 1
    return n


def _zero_partners(ctx: Context, model: torch.nn.Module, zero: list[str], scale: float | None) -> dict[str, list[str]]:
    """Which exactly-zero gradients are the zero initialisation of a product's other factor.

    The trainable tensors whose every value is 0 get small random values, and the step runs once more:
    a parameter whose gradient becomes non-zero got zero only because what it multiplies is zero
    (dL/dA = Bᵀ·dL/dy for y = B·A·x: zero while B = 0, PEFT's LoRA init). Each is paired with the
    all-zero tensors nearest to it in the module tree (names as evidence beside the measurement).
    """
    named = dict(model.named_parameters())
    zeros = [n for n, q in named.items() if q.requires_grad and q.numel() and not bool(q.detach().any())]
    if not zeros or not zero:
        return {}
    gen = torch.Generator().manual_seed(ctx.seed)
    with torch.no_grad():
        for n in zeros:
            q = named[n]
            q.copy_((torch.randn(q.shape, generator=gen) * 1e-2).to(q.device, q.dtype))
    for q in named.values():
        q.grad = None
    seed_everything(ctx.seed)
    try:
        out = as_step_output(ctx.pipeline.step(model, ctx.batch(), lambda s, v, /, **m: v))
        loss = out.loss
        if not (isinstance(loss, torch.Tensor) and loss.requires_grad):
            return {}
        (loss * scale if scale is not None else loss).backward()
    finally:
        with torch.no_grad():
            for n in zeros:
                named[n].zero_()
    found: dict[str, list[str]] = {}
    for n in zero:
        others = [z for z in zeros if z != n]
        if others and _grad_state(named[n]) == "ok":
            near = max(_common(n, z) for z in others)
            found[n] = [z for z in others if _common(n, z) == near]
    return found


def measure_gradients(ctx: Context) -> GradientMeasurement:
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    # Under fp16 the run scales its loss before backward (a GradScaler): tiny gradients would
    # underflow to exactly 0 in an unscaled backward. Read after build_optimizer: it may make it.
    scale = _scale_of(getattr(p, "scaler", None))
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

    seen: dict[str, Any] = {}
    model.train()
    seed_everything(ctx.seed)
    with ModuleCalls(model, on_call=hook).attached_to(), watch.attached():
        with record(values=False) as trace, watch:
            out = as_step_output(p.step(model, ctx.batch(), _dropped_grabber(watch.tap_wrapper(tap), seen)))
    loss = out.loss
    is_tensor = isinstance(loss, torch.Tensor)
    requires = bool(is_tensor and loss.requires_grad and loss.grad_fn is not None)
    if requires and scale is not None:
        loss = loss * scale  # the run's own loss scale: the same gradients the run's backward makes
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
        norm = float(q.grad.float().norm()) / (scale or 1.0) if q.grad is not None else 0.0
        params.append(ParamGrad(name=name, module=module, numel=q.numel(), requires_grad=q.requires_grad,
                                in_optimizer=id(q) in in_opt, used=module in last_forward or module == "",
                                grad=_grad_state(q), grad_norm=norm,
                                last_forward=last_forward.get(module, -1), first_forward=first_forward.get(module, -1),
                                grad_enabled=grad_enabled.get(module), shape=tuple(q.shape),
                                all_zero=bool(q.numel()) and not bool(q.detach().any())))
    stage_grad = {r.name: bool(r.meta["requires_grad"]) for r in trace if "requires_grad" in r.meta}
    zero = [q.name for q in params if q.requires_grad and q.grad == "zero"]
    partners = _zero_partners(ctx, model, zero, scale) if zero and any(q.all_zero and q.requires_grad for q in params) \
        else {}
    return GradientMeasurement(loss_is_tensor=is_tensor, loss_requires_grad=requires, loss_depends_on_logits=depends,
                               params=params, breaks=watch.breaks, stage_requires_grad=stage_grad,
                               stages=trace.names(), stage_order=watch.stage_order, depends_via=via,
                               zero_partners=partners, loss_scale=scale, condition_dropped=seen.get("dropped"),
                               condition_rate=seen.get("rate"), condition_params=_condition_names(p, model))


def _dropped_grabber(inner: Any, seen: dict[str, Any]) -> Any:
    """`inner`, keeping which examples' conditions the step dropped (classifier-free guidance)."""

    def grab(stage: str, value: Any, /, **meta: Any) -> Any:
        if stage == "condition.dropped":
            try:
                seen["dropped"] = [bool(x) for x in np.asarray(value, dtype=bool).reshape(-1)]
                seen["rate"] = float(meta["rate"]) if isinstance(meta.get("rate"), (int, float)) else None
            except Exception:  # a value of another shape or kind: no evidence
                pass
        return inner(stage, value, **meta)

    return grab


def _condition_names(p: Any, model: torch.nn.Module) -> list[str]:
    """The parameters the pipeline names as its condition path (`condition_parameters`), if it does."""
    fn = getattr(p, "condition_parameters", None)
    if fn is None:
        return []
    try:
        ids = {id(q) for q in fn(model)}
    except Exception:  # an optional capability that fails says nothing here
        return []
    return [n for n, q in model.named_parameters() if id(q) in ids]
