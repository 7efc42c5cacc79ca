"""Plain records of what `bisect --checkpoints` measured (no torch): experiments fill them, checks judge them.

`GroupStats` is one optimizer param group at one checkpoint; `CheckpointHealth` is one probe (the
golden batch and one update run from a checkpoint); `Reason` is one statistic a judge found out of
line (unhealthy against the baseline, or changed abnormally between two checkpoints);
`CheckpointPair` holds what the two checkpoints around the change are compared on;
`CheckpointBisect` is the whole search.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["GroupStats", "CheckpointHealth", "Reason", "StageChange", "CheckpointPair", "CheckpointBisect",
           "MOMENT_STATS", "PLACES"]

#: The Adam moment statistics measured per group (bias-corrected like Adam's own step uses them).
MOMENT_STATS = ("exp_avg.max", "exp_avg.rms", "exp_avg.finite", "exp_avg_sq.max", "exp_avg_sq.mean",
                "exp_avg_sq.finite")

#: The places two checkpoints are compared at, in causal order (see checks/checkpoints.py).
PLACES = ("lr", "moments", "weights", "stages", "loss", "grad", "update")


@dataclass
class GroupStats:
    """One param group at one checkpoint. None: not measured (no optimizer state, no gradient)."""

    name: str
    params: int = 0  # number of values
    lr: float | None = None
    weight_norm: float | None = None
    weight_finite: float | None = None  # fraction of finite weights
    step: float | None = None  # the optimizer's own step count for the group (Adam's `step`)
    moments: dict[str, float] = field(default_factory=dict)  # MOMENT_STATS -> value
    grad_norm: float | None = None  # at the optimizer step of the probe's update
    update_ratio: float | None = None  # |Δθ| / |θ| of the probe's update

    def stat(self, name: str) -> float | None:
        """A statistic by its report name: `lr`, `weight_norm`, `grad_norm`, `update_ratio`, `step` or a moment."""
        if name in MOMENT_STATS:
            return self.moments.get(name)
        return getattr(self, name, None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(d.pop("moments"))
        return d


@dataclass
class CheckpointHealth:
    """One probe: the checkpoint, what loading it said, and what its golden run and update measured."""

    name: str
    index: int  # place in the step order
    step: int | None = None
    path: str = ""
    loaded: bool = True
    skip_reason: str | None = None  # why it could not be loaded (then nothing else is measured)
    source: str = ""  # "torch", "safetensors", "hf-dir", "load_checkpoint"
    has_optimizer_state: bool = False
    loss: float | None = None
    grad_norm: float | None = None  # the step's `grad.norm` tap (before clipping), else all groups together
    groups: list[GroupStats] = field(default_factory=list)
    error: str | None = None  # what the step raised, if it did
    vs_golden: str | None = None  # first stage where the run parts from the golden (None: identical)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reasons: list[Reason] = field(default_factory=list)  # filled by the judge: why it is unhealthy

    @property
    def healthy(self) -> bool:
        return self.loaded and not self.reasons

    def group(self, name: str) -> GroupStats | None:
        return next((g for g in self.groups if g.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.name, "index": self.index, "step": self.step, "path": self.path,
                "loaded": self.loaded, "skip_reason": self.skip_reason, "source": self.source,
                "has_optimizer_state": self.has_optimizer_state, "healthy": self.healthy if self.loaded else None,
                "loss": self.loss, "grad_norm": self.grad_norm, "error": self.error, "vs_golden": self.vs_golden,
                "reasons": [r.to_dict() for r in self.reasons], "notes": list(self.notes),
                "seconds": self.seconds, "groups": [g.to_dict() for g in self.groups]}


@dataclass
class Reason:
    """One statistic out of line: at `place` (PLACES), for `group` (None: the whole model), `value`
    against `baseline` (the good end's, or the other checkpoint's); `ratio` = value / baseline."""

    place: str
    statistic: str
    value: float | None
    baseline: float | None = None
    group: str | None = None
    stage: str | None = None  # the tapped stage, for place "stages"
    ratio: float | None = None
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StageChange:
    """One tapped stage of the two checkpoints' golden runs: equal or not, and its magnitudes."""

    stage: str
    kind: str
    equal: bool
    exact: bool = False  # compared exactly (integers, booleans, text, JSON): any difference is a change
    a: dict[str, float | None] = field(default_factory=dict)  # abs_max, std, finite_fraction
    b: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CheckpointPair:
    """The last healthy (`a`) and first unhealthy (`b`) checkpoint, and what they are compared on."""

    a: CheckpointHealth
    b: CheckpointHealth
    steps_between: int = 1
    drift: dict[str, float | None] = field(default_factory=dict)  # group -> |θ_b - θ_a| / |θ_a|
    stages: list[StageChange] = field(default_factory=list)  # in the golden run's tap order

    def group_table(self) -> list[dict[str, Any]]:
        """Per param group, both checkpoints' statistics side by side (and the drift between them)."""
        names = [g.name for g in self.a.groups] + [g.name for g in self.b.groups if self.a.group(g.name) is None]
        rows = []
        for name in names:
            ga, gb = self.a.group(name), self.b.group(name)
            rows.append({"group": name, "drift": self.drift.get(name),
                         "last_healthy": ga.to_dict() if ga else None, "first_unhealthy": gb.to_dict() if gb else None})
        return rows


@dataclass
class CheckpointBisect:
    """The whole search: every probe in probe order, the skips, and its outcome."""

    status: str  # found, ambiguous, flaky_good, flaky_bad, unrunnable_end (experiments/bisect/search.py)
    checkpoints: list[str]  # names in step order
    probes: list[CheckpointHealth] = field(default_factory=list)
    last_healthy: int | None = None  # index into checkpoints
    first_unhealthy: int | None = None
    pair: CheckpointPair | None = None
    factor: float = 10.0
    golden_loss: float | None = None

    @property
    def runs(self) -> int:
        """Golden runs made: probes of checkpoints that loaded (a failed load runs nothing)."""
        return sum(1 for p in self.probes if p.loaded)

    @property
    def skipped(self) -> list[CheckpointHealth]:
        return [p for p in self.probes if not p.loaded]

    def probe_of(self, index: int | None) -> CheckpointHealth | None:
        return next((p for p in self.probes if p.index == index), None) if index is not None else None
