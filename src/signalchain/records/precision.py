"""Plain records of what the precision experiments measured: the scaler's steps, the first overflow,
where low precision parts from float32. Experiments fill them; `checks/precision.py` judges them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["AmpStep", "OpDivergence", "AmpMeasurement"]


@dataclass
class AmpStep:
    """One update under mixed precision, seen from outside (the scaler and the taps)."""

    scale_before: float | None
    scale_after: float | None
    loss: float | None
    grad_norm: float | None  # as tapped (unscaled when the pipeline unscales before clipping)
    skipped: bool
    params_moved: bool | None = None


@dataclass
class OpDivergence:
    """The first op, inside the first divergent stage, whose low-precision output leaves the fp32 one."""

    op: str
    module: str
    index: int  # position among the stage's ops
    rel_error: float
    tolerance: float
    location: str | None = None
    dtype: str = ""


@dataclass
class AmpMeasurement:
    dtype: str | None  # "float16", "bfloat16" or None (no autocast)
    has_scaler: bool
    steps: list[AmpStep] = field(default_factory=list)
    unscaled_grad_norm: float | None = None  # one backward at scale 1 under autocast
    unscaled_nonfinite: list[str] = field(default_factory=list)  # parameters whose scale-1 gradient is not finite
    overflow: Any = None  # OpEvent: first op that overflowed in the scaled backward
    first_overflow_param: str | None = None
    forward: Any = None  # LocateMeasurement of the low-precision forward (+ backward)
    stage_errors: dict[str, float] = field(default_factory=dict)  # stage -> relative error vs fp32
    stage_tolerance: dict[str, float] = field(default_factory=dict)
    comparison: dict[str, Any] | None = None  # compare_traces(...).to_dict() without per-stage detail
    first_divergence: str | None = None
    op_divergence: OpDivergence | None = None
    error: str | None = None
