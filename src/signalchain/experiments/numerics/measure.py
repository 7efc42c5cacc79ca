"""The numerics family's experiment: a few updates under the cheap trigger, the locator when it fires.

Before anything runs, the model and optimizer state are scanned (a resumed checkpoint may bring
NaN with it). Then each update is checked the way the Monitor checks a user's loop — loss finite,
gradients finite before the optimizer step, parameters finite after it, no NaN in a tapped float
value (a loss made finite by `nan_to_num` over a NaN source still shows it upstream) — and the
first update that fails is restored from its snapshot and replayed under the locator. Most runs never fire, and then
the family costs a few plain updates.
"""

from __future__ import annotations

import math

import torch

from ..._tensor import as_float
from ...probes.step_probe import StepProbe
from ...records.numerics import NumericsMeasurement
from .._seed import seed_everything
from ..context import Context
from ..optimisation._train import update_step
from .locate import locate
from .state import Snapshot, scan_state

__all__ = ["measure_numerics", "numerics_report_of"]


def numerics_report_of(ctx: Context) -> NumericsMeasurement | None:
    """This doctor run's numerics report, if the numerics family ran (the precision family reuses its
    replay of update 0 instead of paying for it again: a float16 step on a CPU is slow)."""
    return ctx.result("numerics")


def _params_finite(model: torch.nn.Module) -> bool:
    with torch.no_grad():
        return all(math.isfinite(float(q.sum(dtype=torch.float32))) for q in model.parameters())


def measure_numerics(ctx: Context) -> NumericsMeasurement:
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    scaler = getattr(p, "scaler", None)
    report = NumericsMeasurement(
        before=scan_state(model, optimizer, 0), after=None, updates=0, losses=[], grad_norms=[]
    )
    batch = ctx.batch()
    for k in range(ctx.budget.numerics_steps):
        snap = Snapshot.take(model, optimizer, scaler)
        scale = float(scaler.get_scale()) if scaler is not None else None
        probe = StepProbe(optimizer)
        seed_everything(ctx.seed)
        try:
            out = update_step(p, model, optimizer, batch, probe.tap)
            loss = probe.loss if probe.loss is not None else as_float(out.loss)
            trigger = None
            if not math.isfinite(loss):
                trigger = "loss"
            elif probe.grads_finite is False or (scale is not None and float(scaler.get_scale()) < scale):
                trigger = "grad"
            elif not _params_finite(model):
                trigger = "state"
            elif probe.nan_stage is not None:  # the loss was made finite over a NaN that a tap still shows
                trigger = "tap"
            report.losses.append(loss)
            if probe.grad_norm is not None:
                report.grad_norms.append(probe.grad_norm)
        except Exception as exc:  # the step refused its input (a codec rejecting NaN audio): replay it
            trigger, report.error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            probe.close()
        report.updates = k + 1
        if trigger is not None:
            report.trigger, report.trigger_step = trigger, k
            ctx.say(f"numerics: {trigger} check fired at update {k}; replaying it under the locator")

            def restore(snap: Snapshot = snap) -> None:
                snap.restore(model, optimizer, scaler)
                seed_everything(ctx.seed)

            report.locate = locate(p, model, batch, optimizer, restore=restore)
            break
    report.after = scan_state(model, optimizer, report.updates)
    return report
