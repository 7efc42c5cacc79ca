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

from .._tensor import as_float
from ..pipeline import as_step_output, capabilities
from ..records.numerics import LocateMeasurement, StageStatus
from ..trace import redirect
from ._frames import TORCH_DIR
from ._train import autocast_for, no_tap, update_step
from ._watch import NonFiniteWatch
from .state import scan_batch, state_names

__all__ = ["locate", "forward_backward", "StageWatch"]


def forward_backward(pipeline: Any, model: torch.nn.Module, batch: Any, tap: Any = no_tap) -> Any:
    """Forward and a plain (unscaled) backward, autocast as `update_step` would."""
    model.train()
    dtype = getattr(pipeline, "amp_dtype", None)
    own = "train_step" in capabilities(pipeline)  # a pipeline with its own loop autocasts inside `step`
    with autocast_for(model, None if own else dtype):
        out = as_step_output(pipeline.step(model, batch, tap))
    if isinstance(out.loss, torch.Tensor) and out.loss.requires_grad:
        out.loss.backward()
    return out


class StageWatch:
    """Each tapped value: finite or not, where, per batch row; boolean masks kept for the loss-mask rule."""

    def __init__(self, phase: Callable[[], str] | None = None) -> None:
        self.phase = phase
        self.stages: list[StageStatus] = []
        self.masks: dict[str, np.ndarray] = {}
        self._bad: dict[str, np.ndarray] = {}  # stage -> bool array of non-finite positions
        self._counts: dict[str, int] = {}

    def __call__(self, stage: str, value: Any, order: int) -> None:
        n = self._counts.get(stage, 0)
        self._counts[stage] = n + 1
        name = stage if n == 0 else f"{stage}#{n}"
        x = _as_tensor(value)
        st = StageStatus(name=name, order=order, kind="other", phase=self.phase() if self.phase else "forward")
        self.stages.append(st)
        if x is None:
            return
        if x.dtype == torch.bool:
            self.masks[name] = x.cpu().numpy().copy()
            return
        if not x.is_floating_point():
            return
        st.kind, st.numel = "float", x.numel()
        if x.numel() == 0:
            return
        finite = bool(torch.isfinite(x.sum(dtype=torch.float32)))
        if not finite:
            ok = torch.isfinite(x)
            st.nan, st.inf = int(torch.isnan(x).sum()), int(torch.isinf(x).sum())
            finite = (st.nan + st.inf) == 0
            if not finite:
                self._bad[name] = (~ok).cpu().numpy()
                if x.dim() >= 1:
                    rows = (~ok).reshape(x.shape[0], -1)
                    st.examples = [int(i) for i in torch.nonzero(rows.any(1)).flatten()[:16]]
                    st.all_bad_examples = [int(i) for i in torch.nonzero(rows.all(1)).flatten()[:16]]
                vals = x[ok].float()
                if vals.numel():
                    st.stats = {"min": float(vals.min()), "max": float(vals.max()), "abs_max": float(vals.abs().max())}
        if x.dim() >= 2:
            a = x.detach().float().abs()
            if not finite:
                a = torch.where(torch.isfinite(a), a, torch.zeros((), dtype=a.dtype))
            st.row_abs_max = [float(v) for v in a.reshape(x.shape[0], -1).amax(1)[:64]]

    def judge_masks(self, loss_mask: np.ndarray | None) -> None:
        """Non-finite values only where the loss mask is False are deliberate (AudioCraft fills them)."""
        mask = self.masks.get("mask.loss", loss_mask)
        if mask is None:
            return
        for st in self.stages:
            bad = self._bad.get(st.name)
            if bad is None or bad.ndim < mask.ndim or tuple(bad.shape[: mask.ndim]) != tuple(mask.shape):
                continue
            under = bad.reshape(*mask.shape, -1).any(-1) & mask.astype(bool)
            st.masked_out_only = not bool(under.any())


def _as_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach()  # checked where it lives; only masks and bad positions come to the host
    if isinstance(value, np.ndarray) and value.dtype.kind in "fb":
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float64)
    return None


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


def locate(pipeline: Any, model: torch.nn.Module, batch: Any, optimizer: Any = None, *,
           restore: Callable[[], None] | None = None, tap: Any = no_tap,
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
    grads_bad: list[str] = []
    hooks = []

    def grad_hook(q: torch.Tensor, name: str) -> None:
        watch.paused = True  # our check is not one of the step's ops
        try:
            if q.grad is not None and not bool(torch.isfinite(q.grad.sum(dtype=torch.float32))):
                grads_bad.append(name)
        finally:
            watch.paused = False

    for name, q in model.named_parameters():
        if q.requires_grad:
            hooks.append(q.register_post_accumulate_grad_hook(lambda q, name=name: grad_hook(q, name)))
    out: Any = None
    error = None
    scaled = optimizer is not None and getattr(pipeline, "scaler", None) is not None
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
    except Exception as exc:  # the step may refuse the bad value it made: keep what was seen before
        error = _where(exc)
    finally:
        for h in hooks:
            h.remove()
    loss = _loss_value(out)
    if loss is not None and "loss" not in {s.name for s in stages.stages}:
        watched_tap("loss", torch.tensor(loss))  # a pipeline that does not tap its loss still gets it judged
    mask = out.mask if out is not None else None
    stages.judge_masks(mask.detach().cpu().numpy().astype(bool) if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool else None)
    after = [n for n, q in model.named_parameters() if not bool(torch.isfinite(q.detach().sum(dtype=torch.float32)))] \
        if optimizer is not None else []
    report = LocateMeasurement(events=watch.events, stages=stages.stages, loss=loss,
                          loss_stage="loss" if loss is not None else None, grads_nonfinite=list(dict.fromkeys(grads_bad)),
                          params_nonfinite_after=after, batch_nonfinite=scan_batch(batch), error=error, scaled=scaled,
                          phases=sorted({e.phase for e in watch.events}))
    _place(report)
    if scaled and grads_bad and loss is not None and np.isfinite(loss) and step is None:
        report.unscaled_grads_finite = _unscaled_probe(pipeline, model, batch, restore)
    report.seconds = time.perf_counter() - t0
    return report


def _loss_value(out: Any) -> float | None:
    if out is None:
        return None
    return as_float(out.loss, None)


def _unscaled_probe(pipeline: Any, model: torch.nn.Module, batch: Any, restore: Callable[[], None] | None) -> bool | None:
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
