"""Plain records of what the numerics and precision experiments measured; checks judge them.

They live with the checks (layer 3, judge side) so that checks never import experiments. Every
number is a plain float/int/str so that the records are JSON-able as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["OpEvent", "StageStatus", "LocateMeasurement", "StateIssue", "StateScan",
           "NumericsMeasurement"]


@dataclass
class OpEvent:
    """One op whose output held a non-finite value, seen by the dispatch watch.

    kind: "born"  — non-finite values appeared from inputs that had none of that kind (NaN from
                    finite or ±inf inputs, inf from finite inputs): the value was created here;
          "state" — a parameter, buffer or optimizer moment fed the op a non-finite value;
          "fill"  — a deliberate fill with a non-finite constant (masked_fill(-inf), full(nan));
          "transient" — born, then made finite again in place by the code itself (a guarded division);
          "input" — the batch held this tensor's non-finite values before any code ran (op "batch",
                    target its path in the batch);
          "dead end"  — born in the forward (or an input), but no later value carries it to a tap, the
                        loss or the gradients while another event's value does (T5's log of a zero
                        relative position, cast to an integer bucket: by design, and harmless).
    """

    order: int  # event counter, shared with the taps
    kind: str
    op: str  # aten overload, e.g. "aten.native_layer_norm.default"
    phase: str  # "forward", "backward", "after backward" or "optimizer"
    module: str  # dotted module path ("" outside any module)
    stage: str | None  # filled by the locator: where the value first shows at a tap
    dtype: str
    shape: list[int]
    nan: int
    inf: int
    numel: int
    inputs: list[dict[str, Any]] = field(default_factory=list)  # statistics of each tensor input
    scalars: list[Any] = field(default_factory=list)  # non-tensor arguments (eps, fill values…)
    forward_op: str | None = None  # backward events: the forward op whose gradient this is
    forward_order: int | None = None  # backward events: that forward op's `order`
    target: str | None = None  # the parameter / optimizer moment written (or read, kind "state")
    fp32_finite: bool | None = None  # low-precision ops: the same op on float32 inputs is finite
    location: str | None = None  # user file:line of forward ops (when cheap to know)
    tap_index: int = 0  # number of taps made before this op (its stage is a tap at or after it)
    reached: str | None = None  # the first tap ("loss", "gradients") whose value carries this event's values


@dataclass
class StageStatus:
    """One tapped stage: how many of its values are not finite, and under which mask."""

    name: str
    order: int
    kind: str  # "float", "other"
    phase: str = "forward"  # "after backward" for stages tapped once gradients exist (grad.norm, amp.scale)
    numel: int = 0
    nan: int = 0
    inf: int = 0
    masked_out_only: bool = False  # every non-finite value lies where the loss mask is False
    examples: list[int] = field(default_factory=list)  # batch rows holding a non-finite value
    all_bad_examples: list[int] = field(default_factory=list)  # rows entirely non-finite
    stats: dict[str, Any] = field(default_factory=dict)  # finite min/max/abs_max/std
    row_abs_max: list[float] = field(default_factory=list)  # per batch row, finite values only

    @property
    def bad(self) -> bool:
        return (self.nan + self.inf) > 0 and not self.masked_out_only


@dataclass
class LocateMeasurement:
    """A replayed step under the watch: its op events and tapped stages, in the order they happened."""

    events: list[OpEvent]
    stages: list[StageStatus]
    loss: float | None
    loss_stage: str | None  # the tap the loss was found at ("loss" when tapped)
    grads_nonfinite: list[str]  # parameters with a non-finite gradient, in backward order
    params_nonfinite_after: list[str]  # parameters non-finite after the replayed update
    batch_nonfinite: list[str]  # paths inside the batch that hold non-finite values
    error: str | None = None  # the exception the step raised, if it did ("Type: message @ file:line")
    scaled: bool = False  # the backward ran on a scaled loss (a GradScaler)
    unscaled_grads_finite: bool | None = None  # the same backward at scale 1 (scaler runs only)
    phases: list[str] = field(default_factory=list)  # phases in which some op output was not finite
    seconds: float = 0.0

    def first(self, kinds: tuple[str, ...] = ("input", "born", "state")) -> OpEvent | None:
        return next((e for e in self.events if e.kind in kinds), None)

    def stage(self, name: str) -> StageStatus | None:
        return next((s for s in self.stages if s.name == name), None)


@dataclass
class StateIssue:
    """A parameter, buffer or optimizer moment holding non-finite or absurd values."""

    name: str  # parameter name, or "param[moment]" for optimizer state ("blocks.0.mlp.0.weight[exp_avg_sq]")
    where: str  # "parameter", "buffer", "optimizer"
    problem: str  # "nonfinite", "huge", "negative"
    count: int
    numel: int
    abs_max: float | None = None


@dataclass
class StateScan:
    """Every parameter, buffer and optimizer moment, scanned after `updates` optimizer steps."""

    updates: int
    issues: list[StateIssue]
    params: int = 0
    optimizer_tensors: int = 0


@dataclass
class NumericsMeasurement:
    """The numerics family's run: state before any update, a few cheap-checked updates, the replay.

    trigger: what fired on update `trigger_step` ("loss", "grad", "state", "tap": a tapped float value
    held a NaN while the loss and gradients were finite, "error"), None if nothing.
    """

    before: StateScan
    after: StateScan | None
    updates: int
    losses: list[float]
    grad_norms: list[float]
    trigger: str | None = None
    trigger_step: int | None = None
    locate: LocateMeasurement | None = None
    error: str | None = None
