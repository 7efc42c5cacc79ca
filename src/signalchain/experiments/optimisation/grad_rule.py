"""The gradient the optimizer steps with, against the loss's gradient: one update as the pipeline
does it (its scaler, clipping, unscaling, accumulation), the gradients caught at the optimizer's
first `step()`, and the same batch's loss differentiated plainly twice from the same weights.

What AMP, clipping and accumulation code does to the gradient shows here as a ratio and a cosine:
clipping before `unscale_` leaves |g| · scale at the clipping norm; unscaling twice leaves
|g| · scale at |∇loss|; a wrong accumulation normalisation turns g away from ∇loss.
"""

from __future__ import annotations

from typing import Any

import torch

from ...pipeline import as_step_output, capabilities
from ...probes.first_step_grads import FirstStepGrads
from ...records.optimisation import GradRuleMeasurement
from .._seed import seed_everything
from ..context import Context
from ._train import autocast_for, no_tap, update_step

__all__ = ["measure_grad_rule", "configured_dropout"]


def configured_dropout(model: torch.nn.Module) -> dict[str, float]:
    """Where the model is configured to drop out, and with what p: dropout modules with p > 0, and the
    `*dropout*` fields of a Hugging Face config (its models call the functional dropout)."""
    out: dict[str, float] = {}
    for name, m in model.named_modules():
        p = getattr(m, "p", None)
        if "Dropout" in type(m).__name__ and isinstance(p, (int, float)) and p > 0:
            out[name or "model"] = float(p)
    config = getattr(model, "config", None)
    todo: list[tuple[str, Any]] = []
    if config is not None and hasattr(config, "to_dict"):  # a Hugging Face config, and its sub-configs
        todo = [("config", config)] + [(f"config.{k}", v) for k, v in vars(config).items() if hasattr(v, "to_dict")]
    for where, c in todo:
        for k, v in vars(c).items():
            if "dropout" in k and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                out[f"{where}.{k}"] = float(v)
    return out


def _flat(grads: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([grads[n].reshape(-1) for n in names])


def _loss_grads(ctx: Context, scale: float | None, outer: Any = None) -> dict[str, torch.Tensor]:
    """∇loss at the fresh weights, float32; scaled by `scale` during backward (as a GradScaler does,
    so that fp16 gradients do not underflow) and unscaled after; `step` under an autocast to `outer`
    when given (as update_step runs it for a pipeline without train_step)."""
    p = ctx.pipeline
    model = ctx.fresh_model()
    model.train()
    seed_everything(ctx.seed)
    with autocast_for(model, outer):
        out = as_step_output(p.step(model, ctx.batch(), no_tap))
    ((out.loss.float() * scale) if scale else out.loss.float()).backward()
    return {n: q.grad.detach().float() / (scale or 1.0) for n, q in model.named_parameters() if q.grad is not None}


def _mark_leftovers(optimizer: torch.optim.Optimizer, names: dict[int, str], at_least: float = 0.0
                    ) -> dict[str, torch.Tensor]:
    """Replace every non-zero `.grad` the update left behind by random noise (a marker no batch's
    gradient resembles), of the leftover's norm per tensor, scaled up together so that the markers'
    norm is at least `at_least`; return the markers by name. Nothing is left behind by a pipeline that
    zeroes at the end of its update: then there is nothing to follow."""
    gen = torch.Generator().manual_seed(0)
    left = [q for group in optimizer.param_groups for q in group["params"]
            if q.grad is not None and id(q) in names and bool((q.grad != 0).any())]
    total = float(torch.stack([q.grad.detach().float().norm() for q in left]).norm()) if left else 0.0
    boost = max(1.0, at_least / total) if total > 0 else 1.0
    marks: dict[str, torch.Tensor] = {}
    for q in left:
        noise = torch.randn(q.grad.shape, generator=gen).to(q.grad.device, torch.float32)
        noise *= boost * q.grad.detach().float().norm() / noise.norm().clamp_min(1e-30)
        with torch.no_grad():
            q.grad.copy_(noise.to(q.grad.dtype))
        marks[names[id(q)]] = noise
    return marks


def _nearest(options: list[tuple[dict[str, torch.Tensor], Any]], step: dict[str, torch.Tensor]
             ) -> tuple[dict[str, torch.Tensor], Any]:
    """The candidate gradient nearest (by cosine) to the stepped one, and its autocast setting."""
    if len(options) == 1:
        return options[0]

    def cosine(grads: dict[str, torch.Tensor]) -> float:
        names = sorted(n for n in step if n in grads)
        if not names:
            return -2.0
        x, y = _flat(step, names), _flat(grads, names)
        d = float(x.norm() * y.norm())
        return float(x @ y) / d if d > 0 else -2.0

    return max(options, key=lambda o: cosine(o[0]))


def _after_step(optimizer: torch.optim.Optimizer, probe: FirstStepGrads) -> tuple[float, float] | None:
    """The .grad the update leaves against the gradient its step used: (cosine, norm ratio); None when
    the update zeroed it (or the step saw none). Clipping after `step()` leaves a shorter copy."""
    if not probe.steps or not probe.grads:
        return None
    names = {id(q): n for n, q in probe.model.named_parameters()}
    left = {names[id(q)]: q.grad.detach().float() for g in optimizer.param_groups for q in g["params"]
            if q.grad is not None and id(q) in names and names[id(q)] in probe.grads}
    if not left or not any(bool((v != 0).any()) for v in left.values()):
        return None
    common = sorted(left)
    x, y = _flat(left, common), _flat(probe.grads, common)
    d = float(x.norm() * y.norm())
    return (float(x @ y) / d, float(x.norm() / y.norm())) if d > 0 else None


def measure_grad_rule(ctx: Context) -> GradRuleMeasurement | None:
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    scales: list[float] = []

    def grab(stage: str, value: object, /, **meta: object) -> object:
        if stage == "amp.scale":
            scales.append(float(value))  # type: ignore[arg-type]
        return value

    with FirstStepGrads(model, optimizer).attached_to() as probe:
        seed_everything(ctx.seed)
        update_step(p, model, optimizer, ctx.batch(), grab)
    modes = probe.train_mode
    after_step = _after_step(optimizer, probe)
    dropout = configured_dropout(model)
    if not probe.steps:
        return GradRuleMeasurement(0, 0, 0.0, 0.0, 0.0, 0.0, error="the update made no optimizer step",
                                   train_mode=modes, dropout=dropout)
    scale = scales[0] if scales and scales[0] > 1 else None
    if scale is None:
        try:  # a scaler the pipeline names but whose scale was not tapped
            scaler = getattr(p, "scaler", None)
            got = float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else None
        except Exception:  # no GradScaler-like object: no scale to read
            got = None
        scale = got if got and got > 1 else None
    # Where the update autocasts is not known when a train_step of its own runs `step` (around the whole
    # step, or only the forward that `step` autocasts itself: an outer autocast would also run a codec's
    # encode in bf16 and change the targets): both are tried, and the one nearer the stepped gradient is
    # the loss's gradient, its second pass the noise floor.
    amp = getattr(p, "amp_dtype", None)
    tries = [amp] if "train_step" not in capabilities(p) or amp is None else [amp, None]
    first, outer = _nearest([(_loss_grads(ctx, scale, t), t) for t in tries], probe.grads)
    second = _loss_grads(ctx, scale, outer)
    # A second update: the .grad the first left behind is swapped for a marker at least as long as the
    # loss's own gradient (so that clipping the sum cannot hide it); a step that still holds the marker
    # never zeroed it (each update then follows the running sum).
    loss_norm = float(torch.cat([v.reshape(-1) for v in first.values()]).norm()) if first else 0.0
    marks = _mark_leftovers(optimizer, {id(q): n for n, q in model.named_parameters()}, loss_norm)
    again = None
    if marks:
        try:
            with FirstStepGrads(model, optimizer).attached_to() as again:
                seed_everything(ctx.seed)
                update_step(p, model, optimizer, ctx.batch(), no_tap)
        except Exception:  # a pipeline whose update cannot run twice: only the first is judged
            again = None
    common = sorted(n for n in probe.grads if n in first and n in second)
    if not common:
        return GradRuleMeasurement(probe.steps, 0, 0.0, 0.0, 0.0, 0.0, scale=scale, train_mode=modes,
                                   dropout=dropout, error="no trainable tensor has a gradient on both sides")
    g, a, b = _flat(probe.grads, common), _flat(first, common), _flat(second, common)

    def cos(x: torch.Tensor, y: torch.Tensor) -> float:
        d = float(x.norm() * y.norm())
        return float(x @ y) / d if d > 0 else 0.0

    carry: tuple[float, int] | None = None
    if again is not None and again.steps:
        held = sorted(n for n in marks if n in again.grads)
        if held:
            r, g2 = _flat(marks, held), _flat(again.grads, held)
            along = float(g2 @ r) / float(r @ r)  # the marker's coefficient in the second step's gradient
            carry = (along * float(r.norm()) / max(float(g2.norm()), 1e-30), len(held))
    return GradRuleMeasurement(steps=probe.steps, params=len(common), loss_norm=float(a.norm()),
                               step_norm=float(g.norm()), cosine=cos(g, a), floor=cos(a, b), scale=scale,
                               train_mode=modes, dropout=dropout, carry=carry, scheduler_steps=probe.scheduler_steps,
                               after_step=after_step)
