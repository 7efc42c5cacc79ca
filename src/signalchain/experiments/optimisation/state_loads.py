"""What the pipeline's `build_model` loaded: every `load_state_dict` call it made, watched."""

from __future__ import annotations

from ...probes.state_loads import StateLoads
from ...records.optimisation import StateLoadMeasurement
from .._seed import seed_everything
from ..context import Context

__all__ = ["measure_state_loads"]


def measure_state_loads(ctx: Context) -> StateLoadMeasurement | None:
    """Build the model once more under the watch; None when it loads no state dict (nothing to judge)."""
    try:
        with StateLoads().attached_to() as probe:
            seed_everything(ctx.seed)
            ctx.pipeline.build_model(ctx.seed)
    except Exception as exc:  # build_model itself failing is the golden step's finding
        return StateLoadMeasurement(error=f"{type(exc).__name__}: {exc}")
    return StateLoadMeasurement(calls=probe.calls) if probe.calls else None
