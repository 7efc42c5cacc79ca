"""Mixed precision: what the scaler did, which op overflowed, and where low precision parts from fp32.

Four measurements on the golden batch, from the pipeline's protocol only (`amp_dtype`, `scaler`,
its own update):
1. a few updates, with the loss scale before and after each (a scale that falls = a skipped step)
   and whether the weights moved;
2. one backward at scale 1 under autocast: the unscaled gradient norm, and whether the gradients
   are finite without the scale (if not, no scale can help: the scaler will halve it forever);
3. when a step overflowed or skipped, the step replayed under the non-finite watch: the first op
   and parameter that overflowed;
4. the same weights and batch in low precision and in float32 (the same code, op for op — see
   `_fp32.py`), compared stage by stage with `compare_traces`, then op by op inside the first
   stage that diverges.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..._tensor import as_float
from ...findings import jsonable
from ...golden.compare import Tolerance, compare_traces
from ...pipeline import Pipeline, capabilities
from ...probes.op_recorder import OpRecorder, RecordedOp
from ...records.precision import AmpMeasurement, AmpStep, OpDivergence
from ...trace import StageRecord, Trace
from .._seed import seed_everything
from ..context import Context
from ..optimisation._train import autocast_for, total_grad_norm, update_step
from .locate import forward_backward, locate
from .measure import numerics_report_of
from .state import Snapshot

__all__ = ["measure_precision", "precision_tolerance", "compare_precision"]

_UNIT = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


def precision_tolerance(dtype: str | None, scalar: bool) -> float:
    """Relative tolerance against float32: 32 unit roundoffs for tensors (elementwise, atol scaled by
    the stage's RMS), 8 for scalars. A clean run sits 4-8x inside it (measured on the reference)."""
    u = _UNIT.get(dtype or "", 2.0**-11)
    return (8 if scalar else 32) * u


def _fingerprint(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return torch.stack([q.detach().float().pow(2).sum() for q in model.parameters()])


def _scale(scaler: Any) -> float | None:
    try:
        return float(scaler.get_scale()) if scaler is not None else None
    except Exception:
        return None


def measure_precision(ctx: Context) -> AmpMeasurement:
    p = ctx.pipeline
    dtype = getattr(p, "amp_dtype", None)
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    scaler = getattr(p, "scaler", None)  # read after build_optimizer: the pipeline may make it there
    report = AmpMeasurement(dtype=str(dtype).removeprefix("torch.") if dtype is not None else None,
                       has_scaler=scaler is not None)
    if dtype is None and scaler is None:
        return report
    batch = ctx.batch()
    start = Snapshot.take(model, optimizer, scaler)

    def restore() -> None:
        start.restore(model, optimizer, scaler)
        seed_everything(ctx.seed)

    # 1. updates, seen from the scale and the weights
    ctx.say("precision: updates under the scaler")
    grabbed: dict[str, float] = {}

    def grab(stage: str, value: Any, /, **meta: Any) -> Any:
        if stage in ("grad.norm", "loss") and stage not in grabbed:
            v = as_float(value, None)
            if v is not None:
                grabbed[stage] = v
        return value

    for _ in range(ctx.budget.amp_steps):
        grabbed.clear()

        before, s0 = _fingerprint(model), _scale(scaler)
        seed_everything(ctx.seed)
        try:
            out = update_step(p, model, optimizer, batch, grab)
        except Exception as exc:
            report.error = f"{type(exc).__name__}: {exc}"
            break
        s1 = _scale(scaler)
        moved = not torch.equal(before, _fingerprint(model))
        loss = grabbed.get("loss", as_float(out.loss) if isinstance(out.loss, torch.Tensor) else None)
        skipped = (s1 < s0) if (s0 is not None and s1 is not None) else not moved
        report.steps.append(AmpStep(s0, s1, loss, grabbed.get("grad.norm"), bool(skipped), moved))

    # 2. the gradients at scale 1
    ctx.say("precision: unscaled gradients")
    restore()
    try:
        forward_backward(p, model, batch)
        report.unscaled_grad_norm = total_grad_norm(model)
        report.unscaled_nonfinite = [n for n, q in model.named_parameters()
                                     if q.grad is not None and not bool(torch.isfinite(q.grad).all())]
    except Exception as exc:
        report.error = report.error or f"{type(exc).__name__}: {exc}"
    model.zero_grad(set_to_none=True)

    # 3. the first op that overflowed, when a step went non-finite or was skipped
    bad = any(s.skipped or s.loss is None or not math.isfinite(s.loss) for s in report.steps)
    if bad:
        shared = numerics_report_of(ctx)  # the numerics family replayed update 0 already
        located = shared.locate if (shared is not None and shared.trigger_step == 0) else None
        if located is None:
            ctx.say("precision: replaying the first step under the watch")
            located = locate(p, model, batch, optimizer, restore=restore)
        report.forward = located
        report.overflow = next((e for e in located.events if e.kind == "born" and e.phase != "forward"), None)
        report.first_overflow_param = located.grads_nonfinite[0] if located.grads_nonfinite else None

    # 4. low precision against float32, stage by stage, then op by op
    if dtype is not None:
        ctx.say("precision: the same batch in float32")
        restore()
        compare_precision(p, model, batch, report, ctx.seed)
    restore()
    return report


class _Values:
    """A light recorder: the value of every array stage as float64/int/bool numpy, in tap order."""

    def __init__(self) -> None:
        self.records: list[StageRecord] = []
        self._counts: dict[str, int] = {}

    def __call__(self, stage: str, value: Any, /, **meta: Any) -> Any:
        n = self._counts.get(stage, 0)
        self._counts[stage] = n + 1
        name = stage if n == 0 else f"{stage}#{n}"
        if isinstance(value, torch.Tensor):
            v = value.detach().cpu()
            arr = (v.double() if v.is_floating_point() else v).numpy().copy()
        elif isinstance(value, np.ndarray):
            arr = value.astype(np.float64) if value.dtype.kind == "f" else value.copy()
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            arr = np.asarray(float(value))
        else:
            self.records.append(
                StageRecord(name, len(self.records), "json", "json", [], "cpu", {}, {}, jsonable(value))
            )
            return value
        kind = "scalar" if arr.ndim == 0 else "tensor"
        dtype = "float" if arr.dtype.kind == "f" else str(arr.dtype)
        val = float(arr) if kind == "scalar" else arr
        self.records.append(StageRecord(name, len(self.records), kind, dtype, list(arr.shape), "cpu", {}, {}, val))
        return value


def _run(p: Pipeline, model: torch.nn.Module, batch: Any, seed: int, upcast: bool, span: tuple[int, int] | None = None,
         locations: bool = False) -> tuple[Trace, list[RecordedOp]]:
    rec = OpRecorder(upcast=upcast, span=span, locations=locations)
    values = _Values()
    dtype = getattr(p, "amp_dtype", None)
    own = "train_step" in capabilities(p)  # a pipeline with its own loop autocasts inside `step`
    autocast = autocast_for(model, None if own else dtype)
    seed_everything(seed)
    model.train()  # the mode the run trains in (dropout is seeded)
    with torch.no_grad(), rec.tracking_modules(model), rec, autocast:
        p.step(model, batch, rec.tap_wrapper(values))
    return Trace(values.records), rec.ops


def compare_precision(p: Pipeline, model: torch.nn.Module, batch: Any, report: AmpMeasurement, seed: int) -> None:
    """Fill `stage_errors`, `comparison`, `first_divergence` and `op_divergence` of `report`."""
    low, _ = _run(p, model, batch, seed, upcast=False)
    full, _ = _run(p, model, batch, seed, upcast=True)
    per_stage: dict[str, Tolerance] = {}
    for r in full:
        if r.value is None or r.kind not in ("tensor", "audio", "scalar"):
            continue
        v = np.asarray(r.value, dtype=np.float64)
        if v.dtype.kind != "f" and r.kind != "scalar":
            continue
        tol = precision_tolerance(report.dtype, v.size == 1)
        fin = v[np.isfinite(v)]
        rms = float(np.sqrt(np.mean(fin**2))) if fin.size else 0.0
        per_stage[r.name] = Tolerance(rtol=tol, atol=tol * rms)
        report.stage_tolerance[r.name] = tol
        other = low.get(r.name)
        if other is not None and other.value is not None and np.shape(other.value) == v.shape:
            w = np.asarray(other.value, dtype=np.float64)
            ok = np.isfinite(v) & np.isfinite(w)
            denom = float(np.linalg.norm(v[ok])) if ok.any() else 0.0
            broken = bool((np.isfinite(v) & ~np.isfinite(w)).any())  # finite in float32, not in low precision
            report.stage_errors[r.name] = math.inf if broken else \
                (float(np.linalg.norm((v - w)[ok]) / denom) if denom > 0 else 0.0)
    cmp = compare_traces(full, low, per_stage=per_stage)
    first = cmp.first_divergence
    report.comparison = {"identical": cmp.identical, "downstream": cmp.downstream,
                         "first_divergence": None if first is None else first.to_dict()}
    if first is None or first.stage not in full:
        return
    report.first_divergence = first.stage
    # The ops from the last floating stage that still agreed up to the divergent stage's tap.
    hi = full[first.stage].order + 1
    agreed = [r.order + 1 for r in full if r.order + 1 < hi and r.dtype == "float"]
    span = (agreed[-1] if agreed else 0, hi)
    _, full_ops = _run(p, model, batch, seed, upcast=True, span=span)
    _, low_ops = _run(p, model, batch, seed, upcast=False, span=span, locations=True)
    report.op_divergence = _first_op(low_ops, full_ops, report.dtype)


def _first_op(low: list[RecordedOp], full: list[RecordedOp], dtype: str | None) -> OpDivergence | None:
    """The first op (in order) whose low-precision output is out of tolerance against its float32 twin.

    Casts are left out: autocast casts an input only when it is not already in the target dtype,
    so the two runs differ in their casts and agree on every other op."""
    low = [o for o in low if "_to_copy" not in o.op]
    full = [o for o in full if "_to_copy" not in o.op]
    for i, (a, b) in enumerate(zip(low, full)):
        if a.op != b.op or a.value.shape != b.value.shape:
            return None  # the two runs took different paths here: no op-level answer
        if a.dtype not in _UNIT:
            continue  # computed in float32 in both runs: any difference came in through its inputs
        ref, got = b.value.double(), a.value.double()
        tol = precision_tolerance(dtype, ref.numel() == 1)
        ok = torch.isfinite(ref) & torch.isfinite(got)
        bad_nonfinite = bool((torch.isfinite(ref) & ~torch.isfinite(got)).any())
        fin = ref[ok]
        rms = float(fin.pow(2).mean().sqrt()) if fin.numel() else 0.0
        diff = (got - ref).abs()[ok]
        out = bool((diff > tol * rms + tol * ref.abs()[ok]).any()) if diff.numel() else False
        if out or bad_nonfinite:
            denom = float(fin.norm()) if fin.numel() else 0.0
            rel = float(diff.norm() / denom) if denom > 0 else math.inf
            return OpDivergence(op=a.op, module=a.module, index=i, rel_error=rel if not bad_nonfinite else math.inf,
                                tolerance=tol, location=a.location, dtype=a.dtype)
    return None
