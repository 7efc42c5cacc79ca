"""Replay one step under the non-finite watch and say where the first bad value was born.

The replay covers the forward, the backward and (when an optimizer is given) the update, the way
the pipeline runs them (`update_step`: its own `train_step` when it has one). Taps are checked as
they pass, so a NaN born in numpy code (which no torch hook sees) is still placed at the first
stage that shows it. A step that raises after the NaN was born (a codec refusing NaN audio) keeps
everything recorded before the exception.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..._tensor import as_float
from ...pipeline import Pipeline, as_step_output, capabilities
from ...probes.frames import TORCH_DIR
from ...probes.non_finite_grads import NonFiniteGrads
from ...probes.non_finite_watch import NonFiniteWatch
from ...probes.stage_watch import StageWatch
from ...records.numerics import LocateMeasurement
from ...trace import Tap, redirect
from ..optimisation._train import autocast_for, no_tap, update_step
from .state import nonfinite_tensors, scan_batch, state_names

__all__ = ["locate", "forward_backward"]


def forward_backward(pipeline: Pipeline, model: torch.nn.Module, batch: Any, tap: Tap = no_tap) -> Any:
    """Forward and a plain (unscaled) backward, autocast as `update_step` would."""
    model.train()
    dtype = getattr(pipeline, "amp_dtype", None)
    own = "train_step" in capabilities(pipeline)  # a pipeline with its own loop autocasts inside `step`
    with autocast_for(model, None if own else dtype):
        out = as_step_output(pipeline.step(model, batch, tap))
    if isinstance(out.loss, torch.Tensor) and out.loss.requires_grad:
        out.loss.backward()
    return out


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(TORCH_DIR)]
    last = frames[-1] if frames else None
    at = f" @ {last.filename}:{last.lineno}" if last else ""
    return f"{type(exc).__name__}: {exc}"[:400] + at


def _place(report: LocateMeasurement) -> None:
    """Each event's stage: the first stage after it that shows a bad value (forward), else the first
    floating stage after its (forward) op — an integer or text stage cannot carry it — or "optimizer"."""
    stages = report.stages
    for ev in report.events:
        if ev.phase == "optimizer":
            ev.stage = "optimizer"
            continue
        if ev.phase == "forward":
            later = [s for s in stages if s.order > ev.order]
            shown = next((s for s in later if s.bad), None)
            if shown is not None:
                ev.stage = shown.name
                continue
        else:
            later = stages[ev.tap_index:]
        pick = next((s for s in later if s.kind == "float"), later[0] if later else (stages[-1] if stages else None))
        ev.stage = pick.name if pick else None


def locate(pipeline: Pipeline | None, model: torch.nn.Module, batch: Any, optimizer: Any = None, *,
           restore: Callable[[], None] | None = None, tap: Tap = no_tap,
           step: Callable[[torch.nn.Module, Any], Any] | None = None) -> LocateMeasurement:
    """Replay one step on `batch` under the watch and report every first non-finite value.

    restore: puts model, optimizer, scaler and RNG back to the state before the step (called first).
    optimizer: when given, the full update is replayed (`update_step`); else forward and backward.
    step: a user's own `step(model, batch) -> loss` (the Monitor's replay) instead of the pipeline; its
        `signalchain.tap` calls are watched; with an optimizer, a plain `optimizer.step()` follows.
    """
    t0 = time.perf_counter()
    if restore is not None:
        restore()
    watch = NonFiniteWatch(state_names(model, optimizer), params=dict(model.named_parameters()))
    stages = StageWatch(lambda: "after backward" if watch.backward_seen else "forward")
    watched_tap = watch.tap_wrapper(tap, stages)
    out: Any = None
    error = None
    scaled = optimizer is not None and getattr(pipeline, "scaler", None) is not None
    watch.seed_inputs(nonfinite_tensors(batch))
    with NonFiniteGrads(model, pause=watch.ours).attached_to() as grads:
        try:
            with watch.active(model):
                if step is not None:  # a user's loop: its code taps through the global `tap`
                    with redirect(watched_tap):
                        out = as_step_output(step(model, batch))
                    if isinstance(out.loss, torch.Tensor) and out.loss.requires_grad:
                        out.loss.backward()
                    if optimizer is not None:
                        optimizer.step()
                elif optimizer is not None:
                    out = update_step(pipeline, model, optimizer, batch, watched_tap)
                else:
                    out = forward_backward(pipeline, model, batch, watched_tap)
                _reach_ends(watch, out, model)
        except Exception as exc:  # the step may refuse the bad value it made: keep what was seen before
            error = _where(exc)
        finally:
            watch.remove_handles()  # also when `active` was never entered
    grads_bad = grads.bad
    loss = _loss_value(out)
    if loss is not None and "loss" not in {s.name for s in stages.stages}:
        watched_tap("loss", torch.tensor(loss))  # a pipeline that does not tap its loss still gets it judged
    mask = out.mask if out is not None else None
    stages.judge_masks(
        mask.detach().cpu().numpy().astype(bool)
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
        else None
    )
    after = [n for n, q in model.named_parameters() if not bool(torch.isfinite(q.detach().sum(dtype=torch.float32)))] \
        if optimizer is not None else []
    report = LocateMeasurement(
        events=watch.events,
        stages=stages.stages,
        loss=loss,
        loss_stage="loss" if loss is not None else None,
        grads_nonfinite=list(dict.fromkeys(grads_bad)),
        params_nonfinite_after=after,
        batch_nonfinite=scan_batch(batch),
        error=error,
        scaled=scaled,
        phases=sorted({e.phase for e in watch.events}),
    )
    _place(report)
    if scaled and grads_bad and loss is not None and np.isfinite(loss) and step is None:
        report.unscaled_grads_finite = _unscaled_probe(pipeline, model, batch, restore)
    report.seconds = time.perf_counter() - t0
    return report


def _reach_ends(watch: NonFiniteWatch, out: Any, model: torch.nn.Module) -> None:
    """Which non-finite values reached the loss and the gradients: the origin is the first of those,
    not the first non-finite value anywhere (T5 makes a harmless -inf on every forward)."""
    if out is not None and isinstance(out.loss, torch.Tensor):
        watch.reach("loss", out.loss)
    watch.reach("gradients", [q.grad for q in model.parameters() if q.grad is not None])


def _loss_value(out: Any) -> float | None:
    if out is None:
        return None
    return as_float(out.loss, None)


def _unscaled_probe(
    pipeline: Pipeline, model: torch.nn.Module, batch: Any, restore: Callable[[], None] | None
) -> bool | None:
    """The same forward and backward at scale 1: are the gradients themselves finite?"""
    if restore is not None:
        restore()
    model.zero_grad(set_to_none=True)
    try:
        forward_backward(pipeline, model, batch)
    except Exception:
        return None
    ok = all(q.grad is None or bool(torch.isfinite(q.grad).all()) for q in model.parameters())
    model.zero_grad(set_to_none=True)
    return ok
