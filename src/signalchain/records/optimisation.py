"""Plain records of what optimisation experiments measured. Experiments fill them; checks judge them.

They sit on the measurement plane (layer 1, no torch): experiments fill them, checks and reports
read them, and neither side imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ParamGrad",
    "GraphBreak",
    "GradientMeasurement",
    "GroupRate",
    "UpdateMeasurement",
    "GradRuleMeasurement",
    "CurveMeasurement",
    "SweepMeasurement",
]


@dataclass
class ParamGrad:
    name: str
    module: str
    numel: int
    requires_grad: bool
    in_optimizer: bool
    used: bool  # its module ran in the forward pass
    grad: str  # "ok", "none" (never received one) or "zero" (all exactly zero)
    grad_norm: float = 0.0
    last_forward: int = -1  # event counter when its module last finished a forward
    first_forward: int = -1  # event counter when its module first finished a forward
    grad_enabled: bool | None = None  # any forward of its module ran with grad enabled (None: never ran)
    shape: tuple[int, ...] = ()
    all_zero: bool = False  # every value of the tensor is exactly 0 (a zero-initialised factor)


@dataclass
class GraphBreak:
    """An op that took a value requiring grad out of the autograd graph."""

    op: str
    kind: str  # "detach", "no_grad", "integer cast", "numpy round trip", "leaves torch"
    stage: str | None  # the next stage tapped after it
    location: str  # user code file:line
    order: int  # event counter


@dataclass
class GradientMeasurement:
    loss_is_tensor: bool
    loss_requires_grad: bool
    loss_depends_on_logits: bool | None
    params: list[ParamGrad]
    breaks: list[GraphBreak]
    stage_requires_grad: dict[str, bool]
    stages: list[str]
    stage_order: dict[str, int] = field(default_factory=dict)  # stage -> event counter of its first tap
    # How the loss-on-output question was answered: "logits" (gradient w.r.t. the returned logits),
    # "graph" (the gradient reached the op that produced them, through views the loss shares),
    # "detached" (the returned logits are a detached copy; found through a module output), or None.
    depends_via: str | None = None
    # Parameters whose gradient was exactly zero but became non-zero when the all-zero trainable
    # tensors were set to small random values (one more backward): the zero is the zero
    # initialisation of a product's other factor (A·B with B = 0 gives dL/dA = 0). Name -> the
    # all-zero tensors nearest to it in the module tree.
    zero_partners: dict[str, list[str]] = field(default_factory=dict)
    loss_scale: float | None = None  # the GradScaler scale the measuring backward was scaled by
    condition_dropped: list[bool] | None = None  # per example: its condition dropped (`condition.dropped` tap)
    condition_rate: float | None = None  # the dropout rate the step declared with it (`rate=`)
    condition_params: list[str] = field(default_factory=list)  # the pipeline's `condition_parameters`, by name


@dataclass
class GroupRate:
    """What a few real updates at the configured settings did to one optimizer parameter group.

    The intended update is the optimizer's own step recomputed in float64 from the same state, at a
    rate of 1 (every optimizer's step is linear in its rate), so the share that float rounding loses
    can be told at any rate: `lost_at` pairs a rate with that share (the values the group holds).
    """

    group: int
    tensors: int  # trainable tensors in the group
    values: int  # their values
    dtype: str  # the dtype most of them have ("float32")
    sampled: int = 0  # values measured (a spread of whole tensors, all of them in a small model)
    configured_lr: float | None = None  # before a schedule's factor (`initial_lr`), None when the optimizer sets it
    step_lrs: list[float | None] = field(default_factory=list)  # the rate each measured step used
    with_grad: int = 0  # values with a non-zero gradient, summed over the steps
    stuck: int = 0  # of those (at steps with a non-zero rate), values left bit-identical by the step
    ratio: float | None = None  # median over steps of |Δθ| / |θ| (realised update-to-weight ratio)
    unit_ratio: float | None = None  # median over steps of |u| / |θ|, u the intended update at rate 1
    lost_step: float | None = None  # |Δθ - intended| / |intended| at the steps' own rates
    lost_at: list[list[float]] = field(default_factory=list)  # [[rate, share lost to rounding], ...]
    eps: float | None = None  # the group's eps when its optimizer divides by sqrt(v) + eps (Adam's family)
    eps_share: float | None = None  # values with a gradient whose sqrt(v̂) is below eps (last step)
    shadow_error: str | None = None  # why the intended update could not be recomputed


@dataclass
class UpdateMeasurement:
    steps: int
    changed: dict[str, float]  # parameter -> relative change |Δθ| / |θ| after `steps` updates
    had_grad: dict[str, bool]
    configured_lr: list[float | None]  # None: the optimizer computes the group's rate itself (a relative step)
    effective_lr: list[float | None]
    scaler_scales: list[float] = field(default_factory=list)
    layer_ratio: dict[str, float] = field(default_factory=dict)
    at_step: list[dict[str, int]] = field(default_factory=list)  # per optimizer.step(): params with a gradient
    groups: list[GroupRate] = field(default_factory=list)  # per parameter group: the configured rate at work
    # Tensors with a gradient whose update at the measured steps' rates was 0 or lost to rounding: not
    # moving is what their rate does, not a skipped step.
    below_resolution: list[str] = field(default_factory=list)


@dataclass
class CurveMeasurement:
    """A short training run on the golden batch (the overfit test)."""

    losses: list[float]
    grad_norms: list[float]
    steps: int
    lrs: list[float] = field(default_factory=list)  # the optimizer's learning rate after each step
    step_lrs: list[list[float | None]] = field(default_factory=list)  # per optimizer.step(): each group's rate
    best_lr_losses: list[float] = field(default_factory=list)  # the same run again at the sweep's best rate
    refit_lrs: list[float] = field(default_factory=list)  # every rate the plain re-fit tried, in order
    refit_losses: list[list[float]] = field(default_factory=list)  # its losses at each of them
    unigram_entropy: float | None = None
    regularisation: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    params_moved: bool | None = None  # any parameter differs after the run (None: not measured)


@dataclass
class SweepMeasurement:
    lrs: list[float]
    losses: list[list[float]]  # per lr: loss after each step
    initial: float
    configured: float
    probe_lr: float | None = None
    probe_losses: list[float] = field(default_factory=list)
    probe_grad_norms: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GradRuleMeasurement:
    """The gradient the optimizer's first `step()` received, against the loss's own gradient of the same
    batch at the same weights (two plain backward passes, to know how far two of them differ)."""

    steps: int  # optimizer.step() calls during the pipeline's one update
    params: int  # tensors compared (trainable, with a gradient on both sides)
    loss_norm: float  # |∇loss|, float32, unscaled
    step_norm: float  # |g| the optimizer stepped with
    cosine: float  # cos(g, ∇loss)
    floor: float  # cos(∇loss, ∇loss'): two backward passes of the same batch (dropout, sampling)
    scale: float | None = None  # the GradScaler's scale at that step (None: no scaler)
    error: str | None = None
    train_mode: list[bool] = field(default_factory=list)  # model.training at each forward of the update
    dropout: dict[str, float] = field(default_factory=dict)  # dropout the model is configured with: where -> p
    # A second update after the first's leftover .grad was swapped for a marker of its norm: the share
    # of the second step's gradient norm along the marker, and the tensors marked; None: nothing left.
    carry: tuple[float, int] | None = None
    scheduler_steps: int = 0  # LRScheduler.step() calls during the first update (constructors' not counted)
    # The .grad the first update left behind against the gradient its step used: (cosine, norm ratio);
    # None when it was zeroed. A shorter copy: the gradients were clipped after the step.
    after_step: tuple[float, float] | None = None


@dataclass
class StateLoadMeasurement:
    """The `load_state_dict` calls one `build_model` made (see probes/state_loads.py): per call the
    module, strict, and the key names of the module, the checkpoint, the missing and the unexpected."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    # The checkpoint folder the model's config names (Hugging Face `config._name_or_path`), when it is a
    # local folder with safetensors: its path, tensors compared by name and shape, and how many equal.
    named_checkpoint: dict[str, Any] | None = None
